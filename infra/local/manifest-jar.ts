/**
 * A copy of a jar with its manifest's Class-Path narrowed to jar files, for the DynamoDB Local
 * class archive (dynamo-cds.ts).
 *
 * Why: Amazon's DynamoDBLocal.jar names `.` (its own, non-empty directory), `log4j2.xml` and the
 * sqlite native libraries in its Class-Path. The JVM refuses to archive classes for a class path
 * with a non-empty directory ("Cannot have non-empty directory in paths"), and disables an archive
 * when a non-jar entry exists ("Archived non-system classes are disabled because the file
 * DynamoDBLocal_lib/libsqlite4java-linux-amd64.so exists"). None of those entries holds a class
 * (the natives load through java.library.path), so dropping them changes nothing DynamoDB Local
 * runs.
 *
 * The copy is made by re-linking the zip: every entry's bytes are copied as they are (no
 * recompression), only META-INF/MANIFEST.MF is replaced by a stored entry, and the central
 * directory's offsets are moved accordingly. Zip64 archives are refused (the jar is 5.6 MB).
 */
import { crc32, inflateRawSync } from 'node:zlib';

const EOCD_SIGNATURE = 0x06054b50;
const CENTRAL_SIGNATURE = 0x02014b50;
const LOCAL_SIGNATURE = 0x04034b50;
const MANIFEST = 'META-INF/MANIFEST.MF';
/** A manifest line holds at most 72 bytes; a longer value continues on lines that start with a space. */
const MANIFEST_LINE_BYTES = 72;

export class JarRewriteError extends Error {
  override name = 'JarRewriteError';
}

/** The manifest with only `.jar` entries left in its Class-Path, folded as the jar specification asks. */
export function jarsOnlyManifest(manifest: string): string {
  const unfolded = manifest.replace(/\r?\n /g, '');
  const lines = unfolded.split(/\r?\n/).map((line) => {
    if (!line.startsWith('Class-Path:')) return line;
    const jars = line.slice('Class-Path:'.length).trim().split(/\s+/).filter((entry) => entry.endsWith('.jar'));
    return `Class-Path: ${jars.join(' ')}`;
  });
  return lines.map(foldManifestLine).join('\r\n');
}

function foldManifestLine(line: string): string {
  // The names here are ASCII, so a character is a byte.
  if (line.length <= MANIFEST_LINE_BYTES) return line;
  const parts = [line.slice(0, MANIFEST_LINE_BYTES)];
  for (let at = MANIFEST_LINE_BYTES; at < line.length; at += MANIFEST_LINE_BYTES - 1) parts.push(` ${line.slice(at, at + MANIFEST_LINE_BYTES - 1)}`);
  return parts.join('\r\n');
}

interface CentralEntry {
  name: string;
  /** Where the entry's central record starts and how long it is. */
  record: Buffer;
  localOffset: number;
}

/** The entries of a zip's central directory, and where that directory starts. */
export function readCentralDirectory(zip: Buffer): { entries: CentralEntry[]; centralOffset: number; eocd: number } {
  let eocd = -1;
  for (let at = zip.length - 22; at >= Math.max(0, zip.length - 22 - 0xffff); at--) {
    if (zip.readUInt32LE(at) === EOCD_SIGNATURE) {
      eocd = at;
      break;
    }
  }
  if (eocd < 0) throw new JarRewriteError('not a zip file (no end of central directory)');
  const count = zip.readUInt16LE(eocd + 10);
  const centralOffset = zip.readUInt32LE(eocd + 16);
  if (count === 0xffff || centralOffset === 0xffffffff) throw new JarRewriteError('a zip64 archive (not supported)');
  const entries: CentralEntry[] = [];
  let at = centralOffset;
  for (let i = 0; i < count; i++) {
    if (zip.readUInt32LE(at) !== CENTRAL_SIGNATURE) throw new JarRewriteError(`central directory entry ${i} is corrupt`);
    const nameLength = zip.readUInt16LE(at + 28);
    const length = 46 + nameLength + zip.readUInt16LE(at + 30) + zip.readUInt16LE(at + 32);
    entries.push({ name: zip.toString('utf8', at + 46, at + 46 + nameLength), record: zip.subarray(at, at + length), localOffset: zip.readUInt32LE(at + 42) });
    at += length;
  }
  return { entries, centralOffset, eocd };
}

/** The jar `zip` with its manifest replaced by `rewrite(manifest)`. */
export function rewriteJarManifest(zip: Buffer, rewrite: (manifest: string) => string): Buffer {
  const { entries, centralOffset, eocd } = readCentralDirectory(zip);
  // An entry's local bytes (header, data, data descriptor) run to the next entry's start.
  const starts = [...new Set(entries.map((e) => e.localOffset)), centralOffset].sort((a, b) => a - b);
  const end = (offset: number) => starts[starts.indexOf(offset) + 1]!;
  const manifest = entries.find((e) => e.name === MANIFEST);
  if (!manifest) throw new JarRewriteError(`no ${MANIFEST}`);

  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  for (const entry of entries) {
    const central = Buffer.from(entry.record);
    central.writeUInt32LE(offset, 42);
    let local: Buffer;
    if (entry === manifest) {
      const data = Buffer.from(rewrite(readStoredOrInflated(zip, entry)), 'utf8');
      const crc = crc32(data);
      local = Buffer.alloc(30 + Buffer.byteLength(MANIFEST));
      local.writeUInt32LE(LOCAL_SIGNATURE, 0);
      local.writeUInt16LE(20, 4); // version needed: 2.0
      // The central record's flags (UTF-8 names) without bit 3: the sizes are in this header.
      local.writeUInt16LE(entry.record.readUInt16LE(8) & ~0x0008, 6);
      local.writeUInt16LE(0, 8); // stored
      local.writeUInt16LE(entry.record.readUInt16LE(12), 10);
      local.writeUInt16LE(entry.record.readUInt16LE(14), 12);
      local.writeUInt32LE(crc, 14);
      local.writeUInt32LE(data.length, 18);
      local.writeUInt32LE(data.length, 22);
      local.writeUInt16LE(Buffer.byteLength(MANIFEST), 26);
      local.writeUInt16LE(0, 28);
      local.write(MANIFEST, 30, 'utf8');
      local = Buffer.concat([local, data]);
      central.writeUInt16LE(central.readUInt16LE(8) & ~0x0008, 8);
      central.writeUInt16LE(0, 10);
      central.writeUInt32LE(crc, 16);
      central.writeUInt32LE(data.length, 20);
      central.writeUInt32LE(data.length, 24);
    } else {
      local = zip.subarray(entry.localOffset, end(entry.localOffset));
    }
    locals.push(local);
    centrals.push(central);
    offset += local.length;
  }
  const centralDirectory = Buffer.concat(centrals);
  const tail = Buffer.from(zip.subarray(eocd));
  tail.writeUInt32LE(centralDirectory.length, 12);
  tail.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, centralDirectory, tail]);
}

/** An entry's text, stored or deflated (the two methods a jar uses). */
export function readStoredOrInflated(zip: Buffer, entry: CentralEntry): string {
  const at = entry.localOffset;
  if (zip.readUInt32LE(at) !== LOCAL_SIGNATURE) throw new JarRewriteError(`${entry.name}: local header is corrupt`);
  const method = entry.record.readUInt16LE(10);
  const size = entry.record.readUInt32LE(20);
  const start = at + 30 + zip.readUInt16LE(at + 26) + zip.readUInt16LE(at + 28);
  const data = zip.subarray(start, start + size);
  if (method === 0) return data.toString('utf8');
  if (method === 8) return inflateRawSync(data).toString('utf8');
  throw new JarRewriteError(`${entry.name}: compression method ${method} is not supported`);
}
