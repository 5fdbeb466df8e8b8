// The bearer token the bridge presents to the Knative Broker when the Broker's sender identity is on (feature
// `authentication-oidc`): an audience-bound projected ServiceAccount token (a `serviceAccountToken` volume source
// with the Broker's `status.address.audience`). The kubelet rewrites the file before the token expires (an atomic
// symlink swap), so the file is polled and re-read when it changes, and re-read at once when the Broker answers 401.
// Unlike the endpoints' shared secrets (pkg/transport/auth/token.ts) this is a JWT the cluster issues: no placeholder or
// length rules, only "not empty".
import { readFile, stat } from 'node:fs/promises'
import type { Logger } from '../../observability/log.js'

export interface SinkTokenOptions {
  /** How often the file's identity (inode, size, mtime) is checked. Default 5 s. */
  pollMs?: number
  log?: Logger
}

const identity = (s: { ino: number; size: number; mtimeMs: number }) => `${s.ino}:${s.size}:${s.mtimeMs}`

export class SinkToken {
  private timer?: NodeJS.Timeout
  private reading?: Promise<void>
  /** Reloads that changed the token so far (tests, logs). */
  reloads = 0

  private constructor(
    readonly path: string,
    private token: string,
    private seen: string,
    private readonly opts: SinkTokenOptions,
  ) {}

  /** Reads the file now (throws when unreadable or empty: the bridge must not start without it), then polls it. */
  static async open(path: string, opts: SinkTokenOptions = {}): Promise<SinkToken> {
    const [info, text] = await Promise.all([stat(path), readFile(path, 'utf8')])
    if (!text.trim()) throw new Error(`the sink token file ${path} is empty`)
    const token = new SinkToken(path, text.trim(), identity(info), opts)
    token.timer = setInterval(() => void token.reload(false), Math.max(50, opts.pollMs ?? 5_000))
    token.timer.unref()
    return token
  }

  current(): string {
    return this.token
  }

  /**
   * Re-reads the file: when its identity changed, or always with `force` (the Broker refused the token). An
   * unreadable or empty file keeps the previous token (logged). One read at a time; concurrent callers share it.
   */
  reload(force = true): Promise<void> {
    this.reading ??= this.read(force).finally(() => {
      this.reading = undefined
    })
    return this.reading
  }

  private async read(force: boolean) {
    try {
      const info = await stat(this.path)
      const id = identity(info)
      if (id === this.seen && !force) return
      const text = (await readFile(this.path, 'utf8')).trim()
      this.seen = id
      if (!text) {
        this.opts.log?.error({ file: this.path }, 'the sink token file is empty: keeping the previous token')
        return
      }
      if (text === this.token) return
      this.token = text
      this.reloads++
      this.opts.log?.info({ file: this.path }, 'sink token reloaded from its changed file')
    } catch (err) {
      this.opts.log?.warn({ file: this.path, err: (err as Error).message }, 'cannot read the sink token file')
    }
  }

  close() {
    clearInterval(this.timer)
  }
}
