/**
 * The class archive's writer (dynamo-cds.ts) runs under a small `sh` supervisor, so that the archive
 * lands whether or not the stack's Node process is still there when the writing JVM exits (issue 16).
 *
 * Before it, the stack's process renamed the partial archive into place when the JVM exited. A stack
 * stopped within seconds of its start (scripts/start-time.sh, a quick Ctrl-C, the README test) was
 * gone by then: the JVM still wrote its 35 MB at the parent-death signal, nobody renamed it, and
 * every following start wrote another one. Now the supervisor, which the stack's process starts and
 * the kernel signals at its death (setpriv's parent-death TERM, as for DynamoDB Local), waits for
 * the JVM and settles the partial itself: renamed into place after an exit the JVM handled (143 on
 * SIGTERM, or 0) with a non-empty file, else removed; then the `writing` claim goes. A JVM killed
 * while it writes (137) leaves nothing in use. Why sh: a second Node process for the writer's whole
 * life would cost ~40 MB and its start; sh is in every image and costs neither.
 *
 * Its signals: SIGUSR1 (the stack's process, once the writer has served ARCHIVE_WORKLOAD): the JVM
 * writes now, taking the time it needs at its low priority. SIGTERM, SIGINT or SIGHUP (the stack
 * stops, or its process died): the JVM writes now too, but is killed if it has not exited within
 * the deadline, since nothing of a stopped stack may outlive it by more than 5 s; the write (1.3-1.7
 * CPU s after the JVM's SIGTERM at a load of 10-12; its dump, `-Xlog:cds`: verifying and linking
 * the classes, then 25 MB written in its last ~20 ms) then counts as not finished and the next
 * start tries again. It stays at nice 19 then too (only root may lower a nice value), and the
 * stack's stop waits for it (dynamo-process.ts), so a start typed right after the stop does not
 * take its CPU: scripts/start-time.sh at a load of 8.5-8.7 then mapped the archive from the first
 * restart on, where, without the wait, every write was cut short at a load of 7-17. On a machine
 * busy enough that ~1.5 CPU s at nice 19 take longer than the deadline even so, a stack stopped
 * right after its start keeps no archive, and the next start says so. Not tried, and perhaps
 * better still: no second JVM at all, the stack's own JVM writing at its stop under this
 * supervisor (the first start would be spared the second JVM's 2-3 CPU s).
 *
 * The JVM itself runs under a parent-death KILL: a supervisor killed outright takes it along (its
 * partial, if any, is removed by the next start that takes the claim over).
 *
 * What the last writer came to is kept beside the archive (`last-try`), so a start that writes
 * again says why (stack.ts's DynamoDB Local line).
 */

/**
 * Seconds a writer has, from the stack's stop, to finish its archive before it is killed: the stop's
 * promise is 5 s for everything, and with 4 s the test of it (test/integration/start-stop.test.ts)
 * saw all gone 4.2-4.5 s after the signal at a load of 16, too close.
 */
export const WRITER_STOP_DEADLINE_S = 3;

/** The file beside the archive that says how the last writer ended when it kept no archive (a sentence after "the last writer"). */
export const LAST_TRY = 'last-try';

/** The files one write involves (dynamo-cds.ts `planClassArchive`). */
export interface ArchiveFiles {
  /** Where the JVM writes (`-XX:ArchiveClassesAtExit`). */
  partial: string;
  /** Where a whole archive is renamed to. */
  archive: string;
  /** The `writing` claim: the supervisor writes its own pid there and removes it when done. */
  claim: string;
  /** LAST_TRY's path. */
  lastTry: string;
}

// $1 partial, $2 archive, $3 claim, $4 last-try, $5 deadline (s), $6 setpriv or "", then the JVM's command.
// `wait` returns early (above 128) when a trapped signal arrives; the loop waits again while the JVM
// has not been reaped (kill -0 still finds it, a zombie included).
const SUPERVISOR = `
partial=$1 archive=$2 claim=$3 last=$4 deadline=$5 setpriv=$6
shift 6
jvm= timer= stopped=
write_now() { [ -n "$jvm" ] && kill -TERM "$jvm" 2>/dev/null; }
stopping() {
  stopped=1
  [ -z "$jvm" ] && return
  write_now
  [ -n "$timer" ] && return
  if [ -n "$setpriv" ]; then
    ( "$setpriv" --pdeathsig KILL -- sleep "$deadline"; kill -KILL "$jvm" 2>/dev/null ) &
  else
    ( sleep "$deadline"; kill -KILL "$jvm" 2>/dev/null ) &
  fi
  timer=$!
}
trap write_now USR1
trap stopping TERM INT HUP
echo $$ > "$claim.$$" && mv -f "$claim.$$" "$claim"
# Stopped before the JVM started: nothing to write.
[ -n "$stopped" ] && { rm -f "$claim"; exit 0; }
"$@" &
jvm=$!
# A stop that came as it started (the trap ran before jvm was set).
[ -n "$stopped" ] && stopping
while :; do
  wait "$jvm"
  code=$?
  kill -0 "$jvm" 2>/dev/null || break
done
[ -n "$timer" ] && kill -KILL "$timer" 2>/dev/null
if { [ "$code" -eq 143 ] || [ "$code" -eq 0 ]; } && [ -s "$partial" ]; then
  if err=$(mv -f "$partial" "$archive" 2>&1); then
    rm -f "$last"
  else
    rm -f "$partial"
    echo "could not put its archive in place: $err" > "$last"
  fi
else
  rm -f "$partial"
  if [ "$code" -eq 137 ] && [ -n "$stopped" ]; then
    echo "was cut short: its stack stopped and it had not finished $deadline s later" > "$last"
  else
    echo "ended (exit $code) without an archive" > "$last"
  fi
fi
rm -f "$claim"
`;

/**
 * The supervisor's arguments for `sh`: it runs `jvmCommand` (which should die with it: a parent-death
 * KILL) and settles `files` when it exits. `setpriv` (or undefined) guards its deadline's timer the same way.
 */
export function archiveWriterArgs(files: ArchiveFiles, jvmCommand: readonly string[], setpriv: string | undefined, deadlineS = WRITER_STOP_DEADLINE_S): string[] {
  return ['-c', SUPERVISOR, 'ferry-cds-writer', files.partial, files.archive, files.claim, files.lastTry, String(deadlineS), setpriv ?? '', ...jvmCommand];
}
