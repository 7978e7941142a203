/**
 * The README test's reading of the README (test/support/readme.ts): blocks, markers, command
 * lines, claims, and the claim check, each shown to fail where it must; and the commands the
 * README names outside its sh blocks (npm scripts, ferry commands) exist.
 */
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, test } from 'vitest';
import { COMMAND_HELP } from '../../bin/help.js';
import { claimsOf, readmeBlocks, ReadmeFormatError, unmetClaims } from '../support/readme.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const fence = (body: string, marker = '') => `${marker ? `${marker}\n` : ''}\`\`\`sh\n${body}\n\`\`\`\n`;

describe('blocks and lines', () => {
  test('each sh block in order, with its section, its kind and its command lines; other fences and comments are not commands', () => {
    // Prepare
    const text = [
      '## One',
      fence('a --flag \\\n  b   # joined → x=1, y', ''),
      '```ts\nnpm test\n```',
      '## Two',
      fence('# a comment\n\nc', '<!-- readme-test: skip (aws) -->'),
      fence("FERRY_POLICY='{}' npm start", '<!-- readme-test: restart -->'),
    ].join('\n');
    // Act
    const blocks = readmeBlocks(text);
    // Assess
    expect(blocks.map((b) => [b.kind, b.section, b.lines.map((l) => l.command)])).toEqual([
      ['run', 'One', ['a --flag \\\n  b   # joined → x=1, y']],
      ['skip', 'Two', ['c']],
      ['restart', 'Two', ["FERRY_POLICY='{}' npm start"]],
    ]);
    expect(blocks[0]!.lines[0]).toMatchObject({ lineNo: 3, claims: ['x=1', 'y'] });
  });

  test('an unmarked block that would install, recurse into npm test, start a second stack or deploy fails the parse', () => {
    for (const line of ['npm install && npm start', 'npm test', 'npm ci', 'npx cdk deploy', 'cdk deploy -c inventory=x']) {
      expect(() => readmeBlocks(fence(line)), line).toThrow(ReadmeFormatError);
    }
    expect(() => readmeBlocks(fence('npm test', '<!-- readme-test: skip (it is the test) -->'))).not.toThrow();
  });

  test('a misspelt or malformed marker fails instead of silently running or skipping a block', () => {
    expect(() => readmeBlocks(fence('x', '<!-- readme-test: skp -->'))).toThrow(/unknown readme-test marker "skp"/);
    expect(() => readmeBlocks(fence('x', '<!-- readme-test: skip'))).toThrow(/one whole line/);
    expect(() => readmeBlocks(fence('npm start\nls', '<!-- readme-test: restart -->'))).toThrow(/exactly one line/);
    expect(() => readmeBlocks(fence('ls', '<!-- readme-test: restart -->'))).toThrow(/exactly one line/);
  });

  test('a claim must be in a comment and say something', () => {
    expect(claimsOf('echo a # prose only')).toEqual([]);
    expect(() => claimsOf('echo "→ x"')).toThrow(/outside a # comment/);
    expect(() => claimsOf('echo a→b')).toThrow(/outside a # comment/);
    expect(() => claimsOf('echo a # →  ')).toThrow(/no claim/);
    expect(claimsOf('echo a # prose; → "k":"v,w", status=ok')).toEqual(['"k":"v,w"', 'status=ok']);
  });
});

describe('claims against what a client printed', () => {
  const property = ['+----------+-----------+', '| Property | Value     |', '+----------+-----------+', '| status   | available |', '| host     | cmp1      |', '+----------+-----------+'].join('\n');
  const list = ['+----+-------------+', '| ID | Forced down |', '+----+-------------+', '| a  | False       |', '| b  | True        |', '+----+-------------+'].join('\n');

  test('Field=value holds for a property row, a list column in some row, a loose row a grep printed', () => {
    expect(unmetClaims(property, ['status=available', 'host=cmp1'])).toEqual([]);
    expect(unmetClaims(list, ['Forced down=True', 'ID=a'])).toEqual([]);
    expect(unmetClaims('| task_state     | migration_success |\n', ['task_state=migration_success'])).toEqual([]);
    // openstackclient's record: `Field | Value`.
    expect(unmetClaims(property.replace('Property', 'Field   '), ['status=available', 'host=cmp1'])).toEqual([]);
    // Two tables printed back to back (one border after the other) are both read.
    expect(unmetClaims(`${property}\n${list}`, ['host=cmp1', 'Forced down=False'])).toEqual([]);
  });

  test('a claim the output does not show is reported, not passed', () => {
    expect(unmetClaims(property, ['status=error', 'host=cmp2', 'Forced down=True'])).toEqual(['status=error', 'host=cmp2', 'Forced down=True']);
    // A value in another column of the row, or a substring of the value, is not the claim.
    expect(unmetClaims(list, ['ID=True', 'Forced down=Tru'])).toEqual(['ID=True', 'Forced down=Tru']);
    // The header row is not data.
    expect(unmetClaims(property, ['Property=Value'])).toEqual(['Property=Value']);
    expect(unmetClaims(property.replace('Property', 'Field   '), ['Field=Value'])).toEqual(['Field=Value']);
  });

  test('any other claim is text the output must contain verbatim', () => {
    expect(unmetClaims('audit clean\n', ['audit clean'])).toEqual([]);
    expect(unmetClaims('audit: 2 findings\n', ['audit clean'])).toEqual(['audit clean']);
  });
});

describe('the README itself', () => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');

  test('parses: markers known, nothing unmarked that must not run, claims well formed', () => {
    const blocks = readmeBlocks(readme);
    expect(blocks.some((b) => b.kind === 'run' && b.lines.some((l) => l.claims.length > 0))).toBe(true);
  });

  test('every npm script it names is in package.json', () => {
    const scripts = Object.keys((JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts);
    const named = [...new Set([...readme.matchAll(/\bnpm run ([a-z][a-z0-9:-]*[a-z0-9])/g)].map((m) => m[1]!))];
    expect(named.length).toBeGreaterThan(5);
    expect(named.filter((n) => !scripts.includes(n))).toEqual([]);
  });

  test('every ferry command it names is one the ferry CLI knows', () => {
    const named = [...new Set([...readme.matchAll(/\bnpx ferry ([a-z]+)/g)].map((m) => m[1]!))];
    expect(named.length).toBeGreaterThan(2);
    expect(named.filter((n) => n !== 'help' && !Object.hasOwn(COMMAND_HELP, n))).toEqual([]);
  });
});
