/**
 * Every command line a document shows a user: the lines of its fenced ```sh blocks (as
 * test/support/readme.ts cuts them: continuations and here-documents joined) and the inline code
 * spans of its prose that are whole command lines of a CLI (`cinder get-pools --detail`,
 * `aws ec2 describe-volumes ...`). test/e2e/aws-docs.test.ts runs or lists each of docs/aws.md's.
 */
import { readmeBlocks, type ReadmeLine } from './readme.js';

export interface DocCommand extends ReadmeLine {
  /** `block`: a line of an sh block; `inline`: a code span of the prose. */
  from: 'block' | 'inline';
}

/** The CLIs whose spans are command lines (a span that starts with one and has an argument). */
const CLI = /^(?:cinder|manila|nova|openstack|glance|curl|ferry|npm|npx|aws|cdk|docker)\s+\S/;

export function docCommands(text: string): DocCommand[] {
  const blocks = readmeBlocks(text, { allowNeverRun: true }).flatMap((b) => b.lines.map((l): DocCommand => ({ ...l, from: 'block' })));
  return [...blocks, ...inlineCommands(text)].sort((a, b) => a.lineNo - b.lineNo);
}

/** The prose's inline code spans that are CLI command lines; a span may run over a line break. */
export function inlineCommands(text: string): DocCommand[] {
  // An HTML comment is not read by the user (the doc's note on how it is tested): blanked, its lines kept.
  const lines = text.replace(/<!--[\s\S]*?-->/g, (comment) => comment.replace(/[^\n]/g, ' ')).split('\n');
  const out: DocCommand[] = [];
  let section = '';
  let fenced = false;
  // The prose of a paragraph (or a table row, a list item) as one string, with the line each character came from.
  let prose = '';
  let lineOf: number[] = [];
  const flush = () => {
    for (const m of prose.matchAll(/`([^`]+)`/g)) {
      const command = m[1]!.replace(/\s+/g, ' ').trim();
      if (CLI.test(command)) out.push({ lineNo: lineOf[m.index]!, section, command, claims: [], from: 'inline' });
    }
    prose = '';
    lineOf = [];
  };
  lines.forEach((line, i) => {
    if (line.trimStart().startsWith('```')) {
      flush();
      fenced = !fenced;
      return;
    }
    if (fenced) return;
    if (line.startsWith('## ')) section = line.slice(3).trim();
    if (!line.trim() || line.trimStart().startsWith('|') || line.trimStart().startsWith('- ') || /^\d+\. /.test(line.trimStart())) flush();
    const piece = `${line} `;
    for (let c = 0; c < piece.length; c++) lineOf.push(i + 1);
    prose += piece;
  });
  flush();
  return out;
}
