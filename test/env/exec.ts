// Small process helpers shared by the environment, the fixture and the tests.
import { spawn } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'

export interface RunResult {
  code: number
  stdout: string
  stderr: string
}

export interface RunOptions {
  input?: string
  cwd?: string
  env?: NodeJS.ProcessEnv
  timeoutMs?: number
}

/** Runs a command to completion; never rejects on a nonzero exit (the code is in the result). */
export function run(cmd: string, args: string[], opts: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd: opts.cwd,
      env: opts.env ?? process.env,
      stdio: ['pipe', 'pipe', 'pipe'],
      timeout: opts.timeoutMs ?? 60_000,
      killSignal: 'SIGKILL',
    })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      stdout += d
    })
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      stderr += d
    })
    child.on('error', reject)
    child.on('close', (code, signal) => resolve({ code: code ?? (signal ? 128 : 1), stdout, stderr }))
    child.stdin.on('error', () => {}) // a command that exits without reading its input
    child.stdin.end(opts.input ?? '')
  })
}

/** Like run, but rejects with the command's stderr when it fails. */
export async function runOk(cmd: string, args: string[], opts: RunOptions = {}): Promise<RunResult> {
  const r = await run(cmd, args, opts)
  if (r.code !== 0) {
    throw new Error(`${cmd} ${args.join(' ')} exited ${r.code}: ${(r.stderr || r.stdout).trim()}`)
  }
  return r
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** `count` tasks (task(0) … task(count − 1)), at most `width` at once; the first failure rejects. */
export async function inParallel(count: number, width: number, task: (i: number) => Promise<unknown>) {
  let next = 0
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < count) await task(next++)
    }),
  )
}

/** Polls until check returns a value other than undefined/false, or fails with the last error after timeoutMs. */
export async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined | false> | T | undefined | false,
  opts: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<T> {
  const deadline = Date.now() + (opts.timeoutMs ?? 30_000)
  let last: unknown
  for (;;) {
    try {
      const v = await check()
      if (v !== undefined && v !== false) return v
    } catch (err) {
      last = err
    }
    if (Date.now() > deadline) {
      const detail = last instanceof Error ? `: ${last.message}` : ''
      throw new Error(`timed out after ${opts.timeoutMs ?? 30_000}ms waiting for ${what}${detail}`)
    }
    await sleep(opts.intervalMs ?? 100)
  }
}

/** True while a process with this pid exists and is not a zombie. */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
  } catch {
    return false
  }
  try {
    // A killed child that its parent has not reaped yet still answers kill(0); it is gone for our purposes.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const state = stat.charAt(stat.lastIndexOf(')') + 2)
    return state !== 'Z' && state !== 'X'
  } catch {
    return false
  }
}

/** The command line of a live process, or undefined. */
export function cmdline(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim()
  } catch {
    return undefined
  }
}

/** Live (non-zombie) processes whose command line mentions needle, e.g. an environment's unique directory. */
export function processesMentioning(needle: string): { pid: number; cmd: string }[] {
  const found: { pid: number; cmd: string }[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    const pid = Number(entry)
    if (pid === process.pid) continue
    const cmd = cmdline(pid)
    if (cmd?.includes(needle) && isAlive(pid)) found.push({ pid, cmd })
  }
  return found
}
