"""Reads a subunit v2 stream (`stestr last --subunit`) on stdin and prints one JSON object per
test: {"id", "status", "reason"}. status is success, fail, skip (or xfail, uxsuccess); reason is
the skip reason or (the end of) a failure's traceback (what the runner groups failures by).
Debian's python3-subunit and python3-testtools come with python3-tempest."""
import json
import sys

import subunit
import testtools


def main():
    out = []

    def on_test(test):
        status = test['status']
        if status in ('exists', 'inprogress'):
            return
        details = test.get('details', {})
        reason = ''
        if status == 'skip' and 'reason' in details:
            reason = details['reason'].as_text()
        elif 'traceback' in details:
            reason = details['traceback'].as_text().strip()[-6000:]
        # Tempest's ids carry [id-...,tag] attributes: the name is what comes before them.
        out.append({'id': test['id'].split('[')[0], 'status': status, 'reason': reason})

    stream = subunit.ByteStreamToStreamResult(sys.stdin.buffer, non_subunit_name='stdout')
    result = testtools.StreamToDict(on_test)
    result.startTestRun()
    try:
        stream.run(result)
    finally:
        result.stopTestRun()
    for t in out:
        print(json.dumps(t))


if __name__ == '__main__':
    main()
