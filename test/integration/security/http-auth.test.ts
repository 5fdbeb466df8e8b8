// The HTTP endpoints refuse what they must not take, with the real nats-server and apiserver behind them:
// - a Knative-served function (lifecycle) answers a forged gpu.lease without (or with a wrong) bearer token 401 and
//   does no work; with the token it is processed;
// - the ingress checks the token when the headers arrive, before reading the body (401 while the body is still
//   unsent), answers 413 above its body limit and 408 to a sender that does not finish its request in time;
// - placeholder tokens (the shipped manifests' value among them) stop a process at start with a clear error;
// - the token is re-read when its mounted Secret file changes; a botched rotation keeps the previous one.
import { spawn } from 'node:child_process'
import { randomBytes, randomUUID } from 'node:crypto'
import { mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises'
import { connect as tcpConnect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { CoreV1Api } from '@kubernetes/client-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parseAllDocuments } from 'yaml'
import { encode } from '../../../events/codec.js'
import { INGRESS_TYPES, ingressFunction } from '../../../functions/ingress/index.js'
import { lifecycleFunction } from '../../../functions/lifecycle/index.js'
import { TokenReviewAuth } from '../../../pkg/transport/auth/kubernetes.js'
import { type FileToken, tokenFromEnv, tokenProblem } from '../../../pkg/transport/auth/token.js'
import type { EventFunction } from '../../../pkg/transport/function.js'
import { type HttpFunction, type HttpFunctionOptions, startHttpFunction } from '../../../pkg/transport/http-adapter.js'
import { repoRoot } from '../../env/binaries.js'
import { waitFor } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'

const env = useTestEnv()
const TOKEN = randomBytes(32).toString('hex')
let dir: string
let tokenFile: string
let fileToken: FileToken
/** Every event the lifecycle function's handler was given (the real handler runs after counting). */
const handled: string[] = []
let fn: HttpFunction
let ing: HttpFunction

/** `f` served over HTTP on a free port, with the shared environment's NATS and apiserver behind it. */
const serve = (f: EventFunction, opts: Partial<HttpFunctionOptions> = {}) =>
  startHttpFunction(f, { natsUrl: env.natsUrl, kubeconfig: env.kc, port: 0, ...opts })
/** The lifecycle function (in the test's namespace) that records every event its handler is given into `handled`. */
const serveCountedLifecycle = (auth: Pick<HttpFunctionOptions, 'token' | 'authenticator'>) => {
  const lifecycle = lifecycleFunction()
  return serve(
    {
      ...lifecycle,
      handle(event, deps) {
        handled.push(event.id)
        return lifecycle.handle(event, deps)
      },
    },
    { namespaces: [env.namespace], ...auth },
  )
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'http-auth-'))
  tokenFile = join(dir, 'token')
  await writeFile(tokenFile, `${TOKEN}\n`)
  fn = await serveCountedLifecycle({
    token: (await tokenFromEnv('HTTP_AUTH_TOKEN', { HTTP_AUTH_TOKEN_FILE: tokenFile })) as FileToken,
  })
  fileToken = (await tokenFromEnv('INGRESS_TOKEN', { INGRESS_TOKEN_FILE: tokenFile }, { pollMs: 100 })) as FileToken
  ing = await serve(ingressFunction(), {
    token: fileToken,
    acceptTypes: INGRESS_TYPES,
    bodyLimit: 64 * 1024,
    requestTimeoutMs: 1_000,
  })
})

afterAll(async () => {
  await fn?.stop()
  await ing?.stop()
  await rm(dir, { recursive: true, force: true })
})

const forgedLease = () => {
  const id = randomUUID()
  const body = encode(
    'ai.flexinfer.gpu.lease',
    { namespace: env.namespace, name: 'forged', node: 'node-a', deleted: false },
    { id },
  )
  return { id, body }
}
const post = (url: string, body: string, token?: string, type = 'application/cloudevents+json') =>
  fetch(url, {
    method: 'POST',
    headers: { 'content-type': type, ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) },
    body,
  })

/**
 * Writes a CloudEvent POST by hand — `headers` after Host and Content-Type, then `body`, whatever Content-Length
 * says — and resolves with the first response the server sends (or '' when it closes without one).
 */
function rawPost(url: string, headers: string[], body: string, waitMs: number): Promise<string> {
  const { host, hostname, port } = new URL(url)
  const head = ['POST / HTTP/1.1', `Host: ${host}`, 'Content-Type: application/cloudevents+json', ...headers]
  return new Promise((resolve, reject) => {
    let got = ''
    const socket = tcpConnect(Number(port), hostname, () => socket.write(`${head.join('\r\n')}\r\n\r\n${body}`))
    const timer = setTimeout(() => {
      socket.destroy()
      resolve(got)
    }, waitMs)
    socket.on('data', (d) => {
      got += d.toString()
      if (/\r\n\r\n/.test(got)) {
        clearTimeout(timer)
        socket.destroy()
        resolve(got)
      }
    })
    socket.on('error', reject)
    socket.on('close', () => {
      clearTimeout(timer)
      resolve(got)
    })
  })
}

describe('a Knative-served function (lifecycle over HTTP)', () => {
  it('answers a forged gpu.lease without a token, or with a wrong one, 401 and does no work', async () => {
    const forged = forgedLease()
    expect((await post(fn.url, forged.body)).status).toBe(401)
    expect((await post(fn.url, forged.body, 'x'.repeat(64))).status).toBe(401)
    const binary = await fetch(fn.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'ce-specversion': '1.0',
        'ce-id': forged.id,
        'ce-source': 'forger',
        'ce-type': 'ai.flexinfer.gpu.lease',
        authorization: 'Basic Zm9vOmJhcg==',
      },
      body: JSON.stringify({ namespace: env.namespace, name: 'forged', node: 'node-a', deleted: false }),
    })
    expect(binary.status).toBe(401)
    // The 401 is the request's end: answered by the token check, which runs before the handler (onRequest).
    expect(handled).toEqual([])
  })

  it('processes the same event when it carries the token', async () => {
    const lease = forgedLease()
    const res = await post(fn.url, lease.body, TOKEN)
    expect(res.status).toBe(202)
    expect(handled).toEqual([lease.id])
  })

  it('leaves health and readiness open (what the kubelet probes)', async () => {
    expect((await fetch(`${fn.url}/healthz`)).status).toBe(200)
    expect((await fetch(`${fn.url}/readyz`)).status).toBe(200)
  })
})

describe('the ingress', () => {
  it('checks the token before reading the body: 401 while the announced 10 MB are still unsent', async () => {
    const started = Date.now()
    const answer = await rawPost(ing.url, [`Content-Length: ${10 * 1024 * 1024}`], '{"specversion":"1.0"', 10_000)
    expect(answer).toMatch(/^HTTP\/1\.1 401/)
    // Answered at once, not after the 1 s request deadline (the body never came).
    expect(Date.now() - started).toBeLessThan(900)
  })

  it('answers 413 to an authenticated body above the limit', async () => {
    const big = JSON.stringify({ padding: 'x'.repeat(100 * 1024) })
    const res = await post(ing.url, big, TOKEN)
    expect(res.status).toBe(413)
    // …and when only the header announces it, without reading it either.
    const answer = await rawPost(
      ing.url,
      [`Authorization: Bearer ${TOKEN}`, `Content-Length: ${10 * 1024 * 1024}`],
      '{',
      5_000,
    )
    expect(answer).toMatch(/^HTTP\/1\.1 413/)
  })

  it('answers 408 to a sender that does not finish its request within the deadline', async () => {
    const started = Date.now()
    const answer = await rawPost(
      ing.url,
      [`Authorization: Bearer ${TOKEN}`, 'Content-Length: 500'],
      '{"specversion":"1.0",',
      15_000,
    )
    expect(answer).toMatch(/^HTTP\/1\.1 408/)
    expect(Date.now() - started).toBeGreaterThanOrEqual(900)
  })

  it('re-reads the token when the mounted Secret file changes; a placeholder rotation keeps the previous token', async () => {
    const request = () =>
      encode('ai.flexinfer.foreground.request', { namespace: env.namespace, model: 'm-rotate' }, { source: 'gw' })
    expect((await post(ing.url, request(), TOKEN)).status).toBe(202)
    const rotated = randomBytes(32).toString('hex')
    // As the kubelet does: the new content appears under the same path in one step.
    await writeFile(join(dir, 'token.new'), rotated)
    await rename(join(dir, 'token.new'), tokenFile)
    // Bounded; a token never reloaded fails the expectations below.
    await waitFor('the rotated token', () => fileToken.current() === rotated, {
      timeoutMs: 10_000,
      intervalMs: 50,
    }).catch(() => {})
    expect(fileToken.reloads).toBe(1)
    expect((await post(ing.url, request(), TOKEN)).status).toBe(401)
    expect((await post(ing.url, request(), rotated)).status).toBe(202)

    await writeFile(join(dir, 'token.new'), 'REPLACE_ME')
    await rename(join(dir, 'token.new'), tokenFile)
    // Kept: the poller may be mid-check (check() then returns at once) and a refused file leaves nothing to wait
    // on (FileToken keeps what it has seen private): a moment for the poller to finish, then a check of our own.
    await new Promise((r) => setTimeout(r, 500))
    await fileToken.check()
    expect(fileToken.current()).toBe(rotated)
    expect((await post(ing.url, request(), 'REPLACE_ME')).status).toBe(401)
    expect((await post(ing.url, request(), rotated)).status).toBe(202)
  })
})

describe('placeholder secrets are refused at start', () => {
  it('refuses empty, short and placeholder values, the one earlier manifests shipped included', async () => {
    // The manifests ship no token any more (npm run gen:secrets makes every one); an install still carrying the
    // example of an earlier release is refused.
    const docs = parseAllDocuments(await readFile(join(repoRoot, 'deploy/base/ingress.yaml'), 'utf8')).map((d) =>
      d.toJS(),
    )
    expect(docs.filter((d) => d?.kind === 'Secret')).toEqual([])
    const shipped = 'change-me-ingress-token'
    for (const value of [shipped, '', '   ', 'changeme', 'REPLACE_ME', 'replace-me-please-0000', 'short', 'token'])
      expect(tokenProblem(value), JSON.stringify(value)).toBeDefined()
    expect(tokenProblem(TOKEN)).toBeUndefined()
    await expect(tokenFromEnv('INGRESS_TOKEN', { INGRESS_TOKEN: shipped })).rejects.toThrow(
      /INGRESS_TOKEN is a placeholder/,
    )
    await writeFile(join(dir, 'empty'), '\n')
    await expect(tokenFromEnv('INGRESS_TOKEN', { INGRESS_TOKEN_FILE: join(dir, 'empty') })).rejects.toThrow(/empty/)
    await expect(serve(ingressFunction(), { token: 'change-me-token' })).rejects.toThrow(/placeholder/)
  })

  it('the ingress process exits 2 with the reason, and never prints the value', async () => {
    const tsx = join(repoRoot, 'node_modules/.bin/tsx')
    const runMain = (extra: Record<string, string>) =>
      new Promise<{ code: number | null; output: string }>((resolve) => {
        const child = spawn(tsx, [join(repoRoot, 'cmd/manager/main.ts')], {
          env: { ...process.env, NATS_URL: env.natsUrl, KUBECONFIG: env.kubeconfigPath, PORT: '0', ...extra },
          stdio: ['ignore', 'pipe', 'pipe'],
        })
        let output = ''
        child.stdout?.on('data', (d) => {
          output += d
        })
        child.stderr?.on('data', (d) => {
          output += d
        })
        const timer = setTimeout(() => child.kill('SIGKILL'), 30_000)
        child.on('exit', (code) => {
          clearTimeout(timer)
          resolve({ code, output })
        })
      })
    const ingressRun = await runMain({ FUNCTION: 'ingress', INGRESS_TOKEN: 'change-me-ingress-token' })
    expect(ingressRun.code).toBe(2)
    expect(ingressRun.output).toMatch(/INGRESS_TOKEN is a placeholder/)
    expect(ingressRun.output).not.toContain('change-me-ingress-token')
  }, 60_000)
})

describe("Knative's own sender identity (HTTP_AUTH=kubernetes): OIDC tokens verified by TokenReview", () => {
  const AUDIENCE = `model-backfill-lifecycle-${randomBytes(3).toString('hex')}`
  let served: HttpFunction
  let auth: TokenReviewAuth
  const tokenFor = async (namespace: string, serviceAccount: string, audience: string) => {
    const core = env.kc.makeApiClient(CoreV1Api)
    await core
      .createNamespacedServiceAccount({ namespace, body: { metadata: { name: serviceAccount } } })
      .catch(() => {})
    const tr = await core.createNamespacedServiceAccountToken({
      name: serviceAccount,
      namespace,
      body: { spec: { audiences: [audience], expirationSeconds: 600 } },
    })
    return tr.status?.token as string
  }
  beforeAll(async () => {
    auth = new TokenReviewAuth(env.kc, { audience: AUDIENCE, allowed: [`system:serviceaccount:${env.namespace}:*`] })
    served = await serveCountedLifecycle({ authenticator: auth })
  })
  afterAll(async () => {
    await served?.stop()
  })

  it('processes a delivery carrying a token of an allowed ServiceAccount for our audience, reviewed once', async () => {
    const token = await tokenFor(env.namespace, 'trigger-oidc', AUDIENCE)
    const first = forgedLease()
    expect((await post(served.url, first.body, token)).status).toBe(202)
    const second = forgedLease()
    expect((await post(served.url, second.body, token)).status).toBe(202)
    expect(handled).toContain(first.id)
    expect(handled).toContain(second.id)
    expect(auth.reviews).toBe(1)
  })

  it('refuses another audience, an identity outside the allowed ones, a forged JWT and none: 401, no work', async () => {
    const before = handled.length
    const otherAudience = await tokenFor(env.namespace, 'trigger-oidc', 'some-other-service')
    const otherNamespace = await tokenFor('default', 'default', AUDIENCE)
    const [h, p] = otherAudience.split('.')
    const forgedJwt = `${h}.${p}.${'A'.repeat(40)}`
    for (const token of [otherAudience, otherNamespace, forgedJwt, undefined])
      expect((await post(served.url, forgedLease().body, token)).status).toBe(401)
    expect(handled.length).toBe(before)
  })
})
