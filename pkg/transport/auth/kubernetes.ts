// Knative Eventing's own sender authentication (feature flag `authentication-oidc`): the Broker's filter presents,
// per delivery, a Kubernetes-issued OIDC token of the Trigger's ServiceAccount for the subscriber's audience (the
// Trigger's `spec.subscriber.audience`). The apiserver verifies it (TokenReview, the same check the apiserver makes
// itself); we then require our audience and an allowed identity — a token for our audience alone proves nothing,
// since anyone with a ServiceAccount can request one for any audience.
import { createHash } from 'node:crypto'
import { AuthenticationV1Api, type KubeConfig } from '@kubernetes/client-node'

/** An authenticator the HTTP adapter awaits for each POST (the bearer header as sent). */
export interface RequestAuthenticator {
  verify(authorization: string | undefined): Promise<boolean>
}

export interface TokenReviewOptions {
  /** The audience the token must be issued for (the Trigger's subscriber.audience). */
  audience: string
  /**
   * Usernames accepted, exact or a prefix ending in `*` (e.g. `system:serviceaccount:model-backfill:*`, every
   * ServiceAccount of the namespace Knative creates the Triggers' OIDC ServiceAccounts in). Required, non-empty.
   */
  allowed: string[]
  /** A verified token is trusted this long without a new review (default 30 s; never past its expiry). */
  cacheMs?: number
  /** Cached verdicts kept (default 1,000; oldest dropped first). */
  maxCached?: number
  /** Deadline of one TokenReview (default 5 s): a slow apiserver answers 401, the Broker retries. */
  timeoutMs?: number
}

export class TokenReviewAuth implements RequestAuthenticator {
  private readonly api: AuthenticationV1Api
  private readonly cache = new Map<string, number>()
  /** Reviews asked of the apiserver (tests, logs). */
  reviews = 0

  constructor(
    kc: KubeConfig,
    private readonly opts: TokenReviewOptions,
  ) {
    if (!opts.audience) throw new Error('TokenReview authentication needs an audience (HTTP_AUTH_AUDIENCE)')
    if (!opts.allowed.filter(Boolean).length)
      throw new Error('TokenReview authentication needs the allowed identities (HTTP_AUTH_ALLOWED)')
    this.api = kc.makeApiClient(AuthenticationV1Api)
  }

  private allowedUser(username: string | undefined): boolean {
    if (!username) return false
    return this.opts.allowed.some((a) => (a.endsWith('*') ? username.startsWith(a.slice(0, -1)) : username === a))
  }

  async verify(authorization: string | undefined): Promise<boolean> {
    const token = /^Bearer\s+(\S+)$/i.exec(authorization?.trim() ?? '')?.[1]
    if (!token || token.length > 16_384) return false
    const key = createHash('sha256').update(token).digest('base64')
    const now = Date.now()
    const until = this.cache.get(key)
    if (until !== undefined && until > now) return true
    this.cache.delete(key)
    this.reviews++
    let timer: NodeJS.Timeout | undefined
    try {
      const review = await Promise.race([
        this.api.createTokenReview({ body: { spec: { token, audiences: [this.opts.audience] } } }),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error('TokenReview timed out')), this.opts.timeoutMs ?? 5_000)
        }),
      ])
      const status = review.status
      const ok =
        status?.authenticated === true &&
        (status.audiences ?? []).includes(this.opts.audience) &&
        this.allowedUser(status.user?.username)
      if (ok) {
        if (this.cache.size >= (this.opts.maxCached ?? 1_000))
          this.cache.delete(this.cache.keys().next().value as string)
        this.cache.set(key, now + Math.min(this.opts.cacheMs ?? 30_000, expiresIn(token)))
      }
      return ok
    } catch {
      return false
    } finally {
      clearTimeout(timer)
    }
  }
}

/** Milliseconds until the JWT's `exp` (0 when unreadable: then it is not cached). */
function expiresIn(token: string): number {
  try {
    const payload = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8')) as { exp?: number }
    return typeof payload.exp === 'number' ? Math.max(0, payload.exp * 1000 - Date.now()) : 0
  } catch {
    return 0
  }
}
