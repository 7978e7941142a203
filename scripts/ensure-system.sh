#!/usr/bin/env bash
# Installs what `npm start` and `npm test` need beyond Node on a fresh Debian machine, only when it
# is missing: Java 17 for Amazon's DynamoDB Local (both), the upstream cinder, manila and nova CLIs
# for the e2e tests (`test`), and the npm packages when node_modules is absent.
# Usage: scripts/ensure-system.sh start|test
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-test}

need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
if [ "$what" = test ]; then
  command -v cinder >/dev/null 2>&1 || need+=(python3-cinderclient)
  command -v manila >/dev/null 2>&1 || need+=(python3-manilaclient)
  command -v nova >/dev/null 2>&1 || need+=(python3-novaclient)
fi

if [ ${#need[@]} -gt 0 ]; then
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
      echo "ferry: missing Debian packages: ${need[*]} (run: apt-get install ${need[*]})" >&2
      exit 1
    fi
  fi
  echo "ferry: installing Debian packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ ! -d node_modules/.bin ] || [ ! -e node_modules/.package-lock.json ]; then
  echo "ferry: installing npm packages"
  npm install --no-audit --no-fund
fi
