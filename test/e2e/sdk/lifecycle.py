"""A lifecycle across Ferry's services through openstacksdk (Debian python3-openstacksdk 0.101).

Run with Debian's interpreter (/usr/bin/python3: the package installs there, not into a pyenv)
and nothing but OS_CLIENT_CONFIG_FILE pointing at the clouds.yaml `npm start` writes:

    OS_CLIENT_CONFIG_FILE=.ferry/clouds.yaml /usr/bin/python3 test/e2e/sdk/lifecycle.py

It authenticates as `ferry-demo` and `ferry-admin` through Keystone (/identity/v3), follows the
token's catalog to every service, and prints one JSON line per step ({"step": NAME, ...}); on the
first failure a line {"step": NAME, "error": ...} and exit code 1. test/e2e/openstacksdk-lifecycle
.test.ts asserts the lines.

openstacksdk 0.101's shared_file_system proxy creates, shows and deletes shares but has neither
access rules nor migration: those go through the same proxy as raw requests (its keystoneauth
adapter: the catalog's endpoint, the token, the microversion header), as Manila's API reference
spells them.
"""
import json
import os
import sys
import tempfile
import time

import openstack
from openstack import exceptions

PREFIX = os.environ.get('LIFECYCLE_PREFIX', 'sdk')
TIMEOUT = int(os.environ.get('LIFECYCLE_TIMEOUT', '180'))
# Manila's migration API is experimental: 2.29 is its current form (force-host-assisted,
# preserve-snapshots, writable, nondisruptive all required), 2.45 lists access rules by share.
MANILA_MIGRATION = '2.29'
MANILA_ACCESS = '2.45'
EXPERIMENTAL = {'X-OpenStack-Manila-API-Experimental': 'True'}

_step = 'connect'


def emit(step, **fields):
    print(json.dumps({'step': step, **fields}, default=str), flush=True)


def step(name):
    global _step
    _step = name


def check(resp):
    """Raises the SDK's HTTP exception for a raw proxy response that is not 2xx."""
    exceptions.raise_from_response(resp)
    return resp.json() if resp.content else None


def poll(what, probe, interval=1.0):
    """Calls probe until it returns something truthy; fails after TIMEOUT seconds."""
    deadline = time.monotonic() + TIMEOUT
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f'{what}: not reached in {TIMEOUT} s; last seen {last!r}')


def share_action(conn, share_id, body, microversion, headers=None):
    return check(conn.shared_file_system.post(
        f'/shares/{share_id}/action', json=body, microversion=microversion, headers=headers or {}))


def share_show(conn, share_id):
    return check(conn.shared_file_system.get(f'/shares/{share_id}', microversion=MANILA_MIGRATION))['share']


def run():
    demo = openstack.connect(cloud='ferry-demo')
    admin = openstack.connect(cloud='ferry-admin')
    emit('connect', demo_project=demo.current_project_id, admin_project=admin.current_project_id)

    step('image')
    data = os.urandom(64 * 1024)
    with tempfile.NamedTemporaryFile(suffix='.img') as f:
        f.write(data)
        f.flush()
        image = demo.image.create_image(f'{PREFIX}-img', filename=f.name, disk_format='raw', container_format='bare', wait=True)
    image = demo.image.get_image(image.id)
    emit('image', id=image.id, status=image.status, size=image.size)

    step('volume')
    volume = demo.block_storage.create_volume(name=f'{PREFIX}-vol', size=1)
    volume = demo.block_storage.wait_for_status(volume, 'available', failures=['error'], wait=TIMEOUT)
    emit('volume', id=volume.id, status=volume.status, size=volume.size)

    step('server')
    network = demo.network.find_network('private', ignore_missing=False)
    flavor = demo.compute.find_flavor('m1.small', ignore_missing=False)
    server = demo.compute.create_server(name=f'{PREFIX}-vm', image_id=image.id, flavor_id=flavor.id, networks=[{'uuid': network.id}])
    server = demo.compute.wait_for_server(server, status='ACTIVE', wait=TIMEOUT)
    host = admin.compute.get_server(server.id).compute_host
    emit('server', id=server.id, status=server.status, image=server.image.id, host=host)

    step('attach')
    attachment = demo.compute.create_volume_attachment(server, volume_id=volume.id)
    volume = demo.block_storage.wait_for_status(volume, 'in-use', failures=['error', 'error_attaching'], wait=TIMEOUT)
    emit('attach', device=attachment.device, volume_status=volume.status,
         attached_to=[a['server_id'] for a in volume.attachments])

    step('migrate')
    admin.compute.migrate_server(server.id)
    moved = admin.compute.wait_for_server(admin.compute.get_server(server.id), status='VERIFY_RESIZE', wait=TIMEOUT)
    admin.compute.confirm_server_resize(server.id)
    moved = admin.compute.wait_for_server(moved, status='ACTIVE', wait=TIMEOUT)
    emit('migrate', status=moved.status, from_host=host, host=moved.compute_host)
    host = moved.compute_host

    step('live_migrate')
    admin.compute.live_migrate_server(server.id, block_migration='auto')
    # The action answers 202 with the server still ACTIVE: wait for the host to change, then ACTIVE.
    def live_done():
        s = admin.compute.get_server(server.id)
        return s if (s.compute_host != host and s.status == 'ACTIVE') or s.status == 'ERROR' else None
    live = poll('live migration', live_done)
    if live.status != 'ACTIVE':
        raise RuntimeError(f'live migration ended in {live.status}')
    emit('live_migrate', status=live.status, from_host=host, host=live.compute_host,
         migrations=sorted(m.migration_type for m in admin.compute.migrations() if m.server_id == server.id))

    step('detach')
    demo.compute.delete_volume_attachment(volume.id, server.id, ignore_missing=False)
    volume = demo.block_storage.wait_for_status(volume, 'available', failures=['error', 'error_detaching'], wait=TIMEOUT)
    emit('detach', volume_status=volume.status)

    step('volume_delete')
    demo.block_storage.delete_volume(volume, ignore_missing=False)
    demo.block_storage.wait_for_delete(volume, wait=TIMEOUT)
    emit('volume_delete', id=volume.id)

    step('share')
    share = demo.shared_file_system.create_share(name=f'{PREFIX}-share', share_proto='NFS', size=1)
    share = demo.shared_file_system.wait_for_status(share, 'available', failures=['error'], wait=TIMEOUT)
    emit('share', id=share.id, status=share.status, host=share_show(admin, share.id)['host'])

    step('share_access')
    rule = share_action(demo, share.id, {'allow_access': {'access_type': 'ip', 'access_to': '10.0.0.0/24', 'access_level': 'rw'}}, MANILA_ACCESS)['access']
    # Ferry has no GET /share-access-rules/{id} (docs/compatibility.md): the rule is found through its share.
    def rule_done():
        rules = check(demo.shared_file_system.get(f'/share-access-rules?share_id={share.id}', microversion=MANILA_ACCESS))['access_list']
        r = next((r for r in rules if r['id'] == rule['id']), None)
        return r if r and r['state'] in ('active', 'error') else None
    rule = poll('access rule active', rule_done)
    emit('share_access', id=rule['id'], state=rule['state'], access_to=rule['access_to'])

    step('share_migrate')
    # Driver-assisted, between the two `local-a` backends (README: "Share migration").
    source = share_show(admin, share.id)['host']
    target = 'ferry@nfs-b#pool0' if source != 'ferry@nfs-b#pool0' else 'ferry@nfs-a#pool0'
    share_action(admin, share.id, {'migration_start': {
        'host': target, 'force_host_assisted_migration': False, 'preserve_metadata': True,
        'preserve_snapshots': False, 'writable': True, 'nondisruptive': False}}, MANILA_MIGRATION, EXPERIMENTAL)
    def phase1_done():
        p = share_action(admin, share.id, {'migration_get_progress': None}, MANILA_MIGRATION, EXPERIMENTAL)
        return p if p['task_state'] in ('migration_driver_phase1_done', 'migration_error') else None
    progress = poll('migration phase 1', phase1_done)
    if progress['task_state'] != 'migration_driver_phase1_done':
        raise RuntimeError(f'migration phase 1 ended in {progress["task_state"]}')
    share_action(admin, share.id, {'migration_complete': None}, MANILA_MIGRATION, EXPERIMENTAL)
    def phase2_done():
        s = share_show(admin, share.id)
        return s if s['task_state'] in ('migration_success', 'migration_error') else None
    moved = poll('migration complete', phase2_done)
    emit('share_migrate', task_state=moved['task_state'], status=moved['status'], from_host=source, host=moved['host'])

    step('cleanup')
    share_action(demo, share.id, {'deny_access': {'access_id': rule['id']}}, MANILA_ACCESS)
    demo.shared_file_system.delete_share(share.id, ignore_missing=False)
    demo.shared_file_system.wait_for_delete(share, wait=TIMEOUT)
    demo.compute.delete_server(server.id)
    demo.compute.wait_for_delete(server, wait=TIMEOUT)
    demo.image.delete_image(image.id, ignore_missing=False)
    emit('cleanup', share=share.id, server=server.id, image=image.id)

    step('left')
    emit('left',
         volumes=[v.id for v in demo.block_storage.volumes()],
         servers=[s.id for s in demo.compute.servers()],
         shares=[s.id for s in demo.shared_file_system.shares()],
         images=sorted(i.name for i in demo.image.images() if i.owner == demo.current_project_id))


def main():
    try:
        run()
    except Exception as e:  # noqa: BLE001 - the test reads the step and the error from this line
        detail = getattr(e, 'details', None) or getattr(e, 'response', None) and getattr(e.response, 'text', None)
        emit(_step, error=f'{type(e).__name__}: {e}', detail=detail)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
