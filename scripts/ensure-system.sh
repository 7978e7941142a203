#!/usr/bin/env bash
# Installs what `npm start` and `npm test` need beyond Node on a fresh Debian machine, only when it
# is missing: Java 17 for Amazon's DynamoDB Local and qemu-img for qcow2 server images (both), the
# upstream cinder, manila, nova, glance and openstack CLIs, openstacksdk and Tempest for the e2e
# tests (`test`), and the npm packages when node_modules is absent. First it checks Node itself (`node`: only that, what .ci/run asks before `npm ci`).
# Usage: scripts/ensure-system.sh start|test|node
# `npm start` runs it (`start`) from infra/local/start.mjs only when something it checks changed
# since it last passed (infra/local/system-check.mjs keeps a stamp of what that was): edit the
# checks of `start` below and the next start runs it again (the stamp holds this file's hash).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-test}

# Node: package.json's engines say ^22.13 || >=24, as the dependencies do (@middy/* 7,
# aws-local-stepfunctions 3 and the AWS SDK from January 2027: 22; vite 22.12; watskeburt ^22.13 || >=24). Node 20.19 or later runs all of Ferry too (the test runner wants
# 20.19; infra/local/polyfills.ts adds what 20 lacks), and is what Debian 12 machines here have, so
# it gets a one-line note, once per checkout and Node version (npm's EBADENGINE warnings at install
# say the same at length). Anything older stops here with what to do, not later with a stack trace.
# `node --version` answers before Node starts its JavaScript engine: about 10 ms of CPU against
# ~180 ms for `node -p` (measured here), and this runs before every `npm start`.
node_version=$(node --version)
node_version=${node_version#v}
IFS=. read -r node_major node_minor _ <<<"$node_version"
if [ "$node_major" -lt 20 ] || { [ "$node_major" -eq 20 ] && [ "$node_minor" -lt 19 ]; }; then
  echo "ferry: Node $node_version is too old: Ferry needs Node 22.13 (Node 20.19 or later also runs it). Install Node 22 and run again." >&2
  exit 1
fi
if [ "$node_major" -lt 22 ]; then
  noted=node_modules/.cache/ferry/node-$node_version-noted
  if [ "$what" = node ] || [ ! -e "$noted" ]; then
    echo "ferry: Node $node_version: Ferry's dependencies ask for Node 22.13; 20.19 and later run all of Ferry (README, \"Two commands\")."
    if [ "$what" != node ] && [ -d node_modules ]; then mkdir -p "$(dirname "$noted")" && touch "$noted"; fi
  fi
fi
[ "$what" = node ] && exit 0

need=()
need_bare=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
# qemu-img (both): the local compute driver snapshots a server's root disk as a qcow2 image (shelve,
# cross-cell resize) and spawns from qcow2 images (functions/drivers/qcow2.ts). Without recommends:
# the image tool alone (1.3 MB), not qemu's block-device plugins.
command -v qemu-img >/dev/null 2>&1 || need_bare+=(qemu-utils)
if [ "$what" = test ]; then
  command -v cinder >/dev/null 2>&1 || need+=(python3-cinderclient)
  # Also the `openstack share ...` commands (manilaclient's openstackclient plugin).
  command -v manila >/dev/null 2>&1 || need+=(python3-manilaclient)
  command -v nova >/dev/null 2>&1 || need+=(python3-novaclient)
  command -v openstack >/dev/null 2>&1 || need+=(python3-openstackclient)
  # test/e2e/openstacksdk-lifecycle.test.ts runs test/e2e/sdk/lifecycle.py with Debian's own
  # interpreter (a pyenv python3 first on PATH would not see the package).
  /usr/bin/python3 -c 'import openstack' >/dev/null 2>&1 || need+=(python3-openstacksdk)
  # test/e2e/openstack-image-network.test.ts drives glance too (Debian's openstackclient does not pull it in).
  command -v glance >/dev/null 2>&1 || need+=(python3-glanceclient)
  command -v tmux >/dev/null 2>&1 || need+=(tmux)
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  # OpenStack's API tests (test/conformance, `npm run conformance` and its subset in the e2e tier):
  # Debian's package brings stestr, subunit and testtools with it, so no PyPI is needed.
  command -v tempest >/dev/null 2>&1 || need+=(python3-tempest)
fi

if [ $((${#need[@]} + ${#need_bare[@]})) -gt 0 ]; then
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
      echo "ferry: missing Debian packages: ${need[*]} ${need_bare[*]} (run: apt-get install ${need[*]} ${need_bare[*]})" >&2
      exit 1
    fi
  fi
  echo "ferry: installing Debian packages: ${need[*]} ${need_bare[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  if [ ${#need[@]} -gt 0 ]; then "${sudo[@]}" apt-get install -y -qq "${need[@]}" >/dev/null; fi
  if [ ${#need_bare[@]} -gt 0 ]; then "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need_bare[@]}" >/dev/null; fi
fi

if [ ! -d node_modules/.bin ] || [ ! -e node_modules/.package-lock.json ]; then
  echo "ferry: installing npm packages"
  npm install --no-audit --no-fund
fi
