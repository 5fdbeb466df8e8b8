// Starts test/env/owner-process.ts: a separate Node process owning an environment, for the tests that SIGKILL the
// owner and check that nothing of the environment survives it.
import { type ChildProcessByStdio, spawn } from 'node:child_process'
import type { Readable, Writable } from 'node:stream'
import { repoRoot } from './binaries.js'
import type { EnvironmentInfo } from './environment.js'

export async function startOwnerProcess(args: string[] = []): Promise<{
  child: ChildProcessByStdio<Writable, Readable, Readable>
  info: EnvironmentInfo & { ownerPid: number }
}> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/env/owner-process.ts', ...args], {
    cwd: repoRoot,
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    stderr += d
  })
  const line = await new Promise<string>((resolve, reject) => {
    let out = ''
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      out += d
      if (out.includes('\n')) resolve(out.slice(0, out.indexOf('\n')))
    })
    child.once('exit', (code) => reject(new Error(`owner process exited ${code} before starting:\n${stderr}`)))
  })
  return { child, info: JSON.parse(line) }
}
