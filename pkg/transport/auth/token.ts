// Bearer tokens of the HTTP endpoints (the ingress, the Knative-served functions): a value (INGRESS_TOKEN,
// HTTP_AUTH_TOKEN) or a mounted Secret file (their _FILE variables; cmd/manager/config.ts reads both), refused at start
// when they are a placeholder, compared in constant time, and re-read when the Secret file changes (Kubernetes swaps
// the mounted file atomically; polling stat sees it, fs.watch often not).
import { createHash, timingSafeEqual } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { readFile, stat } from 'node:fs/promises'
import type { Logger } from '../../observability/log.js'

/** What the HTTP adapter asks for the token to compare with (it may change while the process runs). */
export interface TokenProvider {
  current(): string
}

/** Shorter than this is a guess away; `openssl rand -hex 32` gives 64. */
export const MIN_TOKEN_LENGTH = 16

/**
 * Values that only ever mean "not configured": the shipped example manifests' (`change-me-*`), and the usual
 * stand-ins people paste. Compared case-insensitively, also as a part of the value (`change-me-ingress-token`).
 */
const PLACEHOLDER =
  /change[-_ ]?me|replace[-_ ]?me|placeholder|your[-_ ]?token|example|^(secret|token|password|test|dummy)$/i

/** Why a token must not be used, or undefined when it is fine. Never includes the value. */
export function tokenProblem(token: string | undefined): string | undefined {
  if (token === undefined || token.trim() === '') return 'is empty'
  if (PLACEHOLDER.test(token.trim())) return 'is a placeholder value (e.g. the example manifests\' "change-me-…")'
  if (token.trim().length < MIN_TOKEN_LENGTH) return `is shorter than ${MIN_TOKEN_LENGTH} characters`
  return undefined
}

/** Throws, naming the setting, when the token is empty, a placeholder or too short. */
export function assertUsableToken(token: string | undefined, what: string): string {
  const problem = tokenProblem(token)
  if (problem) throw new Error(`${what} ${problem}: set a random secret (e.g. \`openssl rand -hex 32\`)`)
  return (token as string).trim()
}

/** Constant-time comparison of the Authorization header with `Bearer <token>` (hashes equalise the lengths). */
export function bearerMatches(header: string | undefined, token: string): boolean {
  const presented = /^Bearer\s+(.+)$/i.exec(header?.trim() ?? '')?.[1] ?? ''
  const a = createHash('sha256').update(presented).digest()
  const b = createHash('sha256').update(token).digest()
  return timingSafeEqual(a, b) && presented.length > 0
}

/**
 * A token from the settings (the environment as the entry point read it): `<NAME>` itself, or the file named by
 * `<NAME>_FILE` (a mounted Secret), trimmed.
 * Undefined when neither is set; throws when the file cannot be read or is empty.
 */
export function readToken(name: string, env: Readonly<Record<string, string | undefined>>): string | undefined {
  const file = env[`${name}_FILE`]
  if (file) {
    const token = readFileSync(file, 'utf8').trim()
    if (!token) throw new Error(`${name}_FILE (${file}) is empty`)
    return token
  }
  const value = env[name]?.trim()
  return value ? value : undefined
}

export interface FileTokenOptions {
  /** How often the file's identity (inode, size, mtime) is checked. Default 5 s. */
  pollMs?: number
  log?: Logger
  /** Label for logs and errors (e.g. INGRESS_TOKEN_FILE). */
  what?: string
}

/**
 * A token kept in a file and re-read when the file changes. A changed file that is unreadable, empty or a
 * placeholder is refused (logged) and the previous token stays: a botched rotation never opens the endpoint.
 */
export class FileToken implements TokenProvider {
  private token: string
  private seen: string
  private timer?: NodeJS.Timeout
  private checking = false
  /** Reloads so far (tests, logs). */
  reloads = 0

  private constructor(
    private readonly path: string,
    token: string,
    seen: string,
    private readonly opts: FileTokenOptions,
  ) {
    this.token = token
    this.seen = seen
  }

  /** Reads and checks the file now (throws if unusable), then polls it. */
  static async open(path: string, opts: FileTokenOptions = {}): Promise<FileToken> {
    const what = opts.what ?? path
    const [info, text] = await Promise.all([stat(path), readFile(path, 'utf8')])
    const source = new FileToken(path, assertUsableToken(text, what), identity(info), opts)
    source.timer = setInterval(() => void source.check(), Math.max(50, opts.pollMs ?? 5_000))
    source.timer.unref()
    return source
  }

  current(): string {
    return this.token
  }

  /** One poll: re-reads the file if its identity changed. Exposed for tests. */
  async check(): Promise<void> {
    if (this.checking) return
    this.checking = true
    const what = this.opts.what ?? this.path
    try {
      const info = await stat(this.path)
      const id = identity(info)
      if (id === this.seen) return
      const text = await readFile(this.path, 'utf8')
      this.seen = id
      const problem = tokenProblem(text)
      if (problem) {
        this.opts.log?.error({ file: what }, `the changed token file ${problem}: keeping the previous token`)
        return
      }
      if (text.trim() === this.token) return
      this.token = text.trim()
      this.reloads++
      this.opts.log?.info({ file: what }, 'bearer token reloaded from its changed file')
    } catch (err) {
      this.opts.log?.warn({ file: what, err: (err as Error).message }, 'cannot read the token file: keeping the token')
    } finally {
      this.checking = false
    }
  }

  close() {
    clearInterval(this.timer)
  }
}

const identity = (s: { ino: number; size: number; mtimeMs: number }) => `${s.ino}:${s.size}:${s.mtimeMs}`

/**
 * The token an endpoint is configured with: `<NAME>_FILE` (polled for changes) or `<NAME>` (fixed). Undefined when
 * neither is set; throws when the value is empty or a placeholder.
 */
export async function tokenFromEnv(
  name: string,
  env: Readonly<Record<string, string | undefined>>,
  opts: Omit<FileTokenOptions, 'what'> = {},
): Promise<TokenProvider | undefined> {
  const file = env[`${name}_FILE`]
  if (file) return FileToken.open(file, { ...opts, what: `${name}_FILE (${file})` })
  if (env[name] === undefined) return undefined
  const token = assertUsableToken(env[name], name)
  return { current: () => token }
}
