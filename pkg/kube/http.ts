// How this process talks to the apiserver: its kubeconfig, a deadline on every request and connections reused
// across requests. Every request has a deadline (KUBE_REQUEST_TIMEOUT_MS): a half-open apiserver connection can hang
// a request for minutes, holding a concurrency slot.
import { createHash } from 'node:crypto'
import https from 'node:https'
import tls from 'node:tls'
import {
  type Configuration,
  createConfiguration,
  type HttpLibrary,
  IsomorphicFetchHttpLibrary,
  KubeConfig,
  PatchStrategy,
  type RequestContext,
  type SecurityAuthentication,
  ServerConfiguration,
  setHeaderOptions,
  wrapHttpLibrary,
} from '@kubernetes/client-node'
import { DEFAULT_KUBE_REQUEST_TIMEOUT_MS, KubeRequestTimeout } from './deadline.js'

/** The kubeconfig of this process: in a pod its ServiceAccount (token and CA), else KUBECONFIG / ~/.kube/config. */
export function loadKubeConfig(): KubeConfig {
  const kc = new KubeConfig()
  kc.loadFromDefault()
  return kc
}

/**
 * client-node's fetch with a deadline per request: aborted after `timeoutMs` unless the whole answer (headers and
 * body, which the API layer reads later) is in; the abort surfaces as a KubeRequestTimeout. One timer per request,
 * cleared as soon as the body is read.
 */
export function deadlineHttpLibrary(timeoutMs: number): HttpLibrary {
  const inner = new IsomorphicFetchHttpLibrary()
  return wrapHttpLibrary({
    async send(request) {
      const controller = new AbortController()
      const timer = setTimeout(() => controller.abort(), timeoutMs)
      timer.unref()
      const caller = request.getSignal()
      request.setSignal(caller ? AbortSignal.any([caller, controller.signal]) : controller.signal)
      const timedOut = (err: unknown) =>
        controller.signal.aborted && !caller?.aborted
          ? new KubeRequestTimeout(request.getHttpMethod().toString(), request.getUrl(), timeoutMs)
          : err
      let response: Awaited<ReturnType<ReturnType<HttpLibrary['send']>['toPromise']>>
      try {
        response = await inner.send(request).toPromise()
      } catch (err) {
        clearTimeout(timer)
        throw timedOut(err)
      }
      const { body } = response
      const guarded =
        <T>(read: () => Promise<T>) =>
        async () => {
          try {
            return await read()
          } catch (err) {
            throw timedOut(err)
          } finally {
            clearTimeout(timer)
          }
        }
      response.body = { text: guarded(() => body.text()), binary: guarded(() => body.binary()) }
      return response
    },
  })
}

/** The request options of a JSON merge patch. */
export const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch)

/**
 * The KubeConfig's authentication with a connection pool. client-node 1.x gives every request a new https.Agent,
 * so every API call would pay a TCP and TLS handshake, in time and in CPU under load: on the preemption path that
 * handshake stands between a cancel request and its DELETE. Credentials are still applied per request from the
 * KubeConfig (a rotated ServiceAccount token is picked up); only connections are reused, over one keep-alive agent
 * per TLS identity (replaced, and the old one closed, when the CA or client certificate changes).
 */
export class PooledAuthentication implements SecurityAuthentication {
  private agent?: https.Agent
  private identity?: string
  /** TCP + TLS connections opened so far (the tests and the benchmark read it). */
  connections = 0

  constructor(private readonly kc: KubeConfig) {}

  getName() {
    return 'kubeconfig-pooled'
  }

  async applySecurityAuthentication(context: RequestContext) {
    await this.kc.applySecurityAuthentication(context)
    const made = context.getAgent()
    // Plain HTTP and proxies stay as the library made them.
    if (!made || made.constructor !== https.Agent) return
    const o = (made as https.Agent).options
    const hash = createHash('sha256')
    for (const part of [o.ca, o.cert, o.key, o.pfx, o.passphrase, o.servername, o.rejectUnauthorized]) {
      for (const v of Array.isArray(part) ? part : [part]) hash.update(Buffer.isBuffer(v) ? v : String(v)).update('\0')
    }
    const identity = hash.digest('base64')
    if (identity !== this.identity) {
      this.agent?.destroy()
      // One TLS context per identity: without it every new connection parses the CA, certificate and key again
      // (tls.connect makes a context per socket), CPU that a start or a burst, opening several, pays for each.
      const secureContext = tls.createSecureContext({
        ca: o.ca,
        cert: o.cert,
        key: o.key,
        pfx: o.pfx,
        passphrase: o.passphrase,
      })
      const agent = new https.Agent({ ...o, keepAlive: true, secureContext })
      const connect = agent.createConnection.bind(agent)
      agent.createConnection = (...args: Parameters<typeof connect>) => {
        this.connections++
        return connect(...args)
      }
      this.agent = agent
      this.identity = identity
    }
    context.setAgent(this.agent as https.Agent)
  }

  close() {
    this.agent?.destroy()
    this.agent = undefined
    this.identity = undefined
  }
}

/** An API client of the KubeConfig's current cluster that reuses its connections (see PooledAuthentication). */
export function makePooledClient<T>(
  kc: KubeConfig,
  auth: PooledAuthentication,
  Api: new (configuration: Configuration) => T,
  requestTimeoutMs = DEFAULT_KUBE_REQUEST_TIMEOUT_MS,
): T {
  const cluster = kc.getCurrentCluster()
  if (!cluster) throw new Error('the kubeconfig has no current cluster')
  return new Api(
    createConfiguration({
      baseServer: new ServerConfiguration(cluster.server, {}),
      authMethods: { default: auth },
      httpApi: deadlineHttpLibrary(requestTimeoutMs),
    }),
  )
}
