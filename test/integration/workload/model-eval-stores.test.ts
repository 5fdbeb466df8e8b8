// model-eval's stores against the real servers: the ConfigMap of the run under concurrent writers (the
// compare-and-set on resourceVersion: one record per item, whichever writer wins) and past its size limit (records
// kept by the attempt, one warning, the run still assembles); PostgreSQL's migrations applied once by two attempts
// starting at once, and its records first-wins under concurrent writers.
import { randomBytes } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { CoreV1Api } from '@kubernetes/client-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ItemRecord } from '../../../cmd/model-eval/items.js'
import { readSettings } from '../../../cmd/model-eval/settings.js'
import { ConfigMapStores, progressName } from '../../../cmd/model-eval/store-configmap.js'
import { MIGRATIONS, PostgresStores } from '../../../cmd/model-eval/store-postgres.js'
import { useTestEnv } from '../../env/fixture.js'
import { type PostgresInfo, startPostgres } from '../../env/postgres.js'
import { Reaper } from '../../env/supervisor.js'

const env = useTestEnv()
const settings = readSettings({ OPENAI_BASE_URL: 'http://127.0.0.1:1/v1', MODELS: 'm=vllm' }, () => 'x')
const record = (id: string, attempt: number, size = 10): ItemRecord => ({
  id,
  attempt,
  startedAt: new Date(0).toISOString(),
  ms: 1,
  result: { pad: 'x'.repeat(size) },
})

let reaper: Reaper
let dir: string
let pg: PostgresInfo
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'model-eval-stores-'))
  reaper = new Reaper()
  reaper.removeDir(dir)
  pg = (await startPostgres({ dir, reaper })).info
}, 120_000)
afterAll(async () => {
  await reaper?.reap()
  await rm(dir, { recursive: true, force: true })
})

describe('ConfigMap of the run', () => {
  it('concurrent writers record each item once', async () => {
    const core = env.kc.makeApiClient(CoreV1Api)
    const runId = `run-${randomBytes(4).toString('hex')}`
    const writers = [1, 2, 3].map(() => new ConfigMapStores(core, env.namespace, settings, () => {}))
    const first = writers[0] as ConfigMapStores
    await Promise.all(writers.map((w, i) => w.begin(runId, i + 1)))
    const ids = ['m/info', 'm/probe/a', 'm/probe/b', 'm/bench/1']
    const outcomes = await Promise.all(
      ids.flatMap((id) => writers.map((w, i) => w.record(runId, record(id, i + 1)).then((added) => ({ id, added })))),
    )
    for (const id of ids)
      expect(
        outcomes.filter((o) => o.id === id && o.added),
        id,
      ).toHaveLength(1)
    const { records, attempts } = await first.records(runId)
    expect(records.map((r) => r.id).sort()).toEqual([...ids].sort())
    expect(attempts).toEqual([1, 2, 3])
    await first.finish(runId)
    await expect(
      core.readNamespacedConfigMap({ name: progressName(runId), namespace: env.namespace }),
    ).rejects.toMatchObject({ code: 404 })
  })

  it('past its limit keeps records in the attempt, warns once, and still has them all', async () => {
    const core = env.kc.makeApiClient(CoreV1Api)
    const runId = `run-${randomBytes(4).toString('hex')}`
    const warnings: string[] = []
    const store = new ConfigMapStores(core, env.namespace, settings, (l) => warnings.push(l), 2048)
    await store.begin(runId, 1)
    for (let i = 0; i < 6; i++) expect(await store.record(runId, record(`m/bench/${i}`, 1, 600))).toBe(true)
    expect(await store.record(runId, record('m/bench/5', 1, 600))).toBe(false)
    expect(warnings).toHaveLength(1)
    expect(warnings[0]).toMatch(/reached 2048 bytes/)
    const cm = await core.readNamespacedConfigMap({ name: progressName(runId), namespace: env.namespace })
    const kept = Object.keys(cm.data ?? {}).filter((k) => k.startsWith('item_')).length
    expect(kept).toBeGreaterThan(0)
    expect(kept).toBeLessThan(6)
    expect((await store.records(runId)).records).toHaveLength(6)
    await store.finish(runId)
  })
})

describe('PostgreSQL', () => {
  it('two attempts starting at once apply each migration once; records are first-wins', async () => {
    const a = new PostgresStores(pg.url, settings)
    const b = new PostgresStores(pg.url, settings)
    try {
      const [ma, mb] = await Promise.all([a.migrate(), b.migrate()])
      expect([...ma, ...mb]).toEqual(MIGRATIONS.map((m) => m.version))
      expect(await a.migrate()).toEqual([])
      const runId = `run-${randomBytes(4).toString('hex')}`
      await Promise.all([a.begin(runId, 1), b.begin(runId, 2)])
      const added = await Promise.all([a.record(runId, record('m/info', 1)), b.record(runId, record('m/info', 2))])
      expect(added.filter(Boolean)).toHaveLength(1)
      const { records, attempts } = await b.records(runId)
      expect(records).toHaveLength(1)
      expect(attempts).toEqual([1, 2])
      const rows = await a.sql<{ version: number }[]>`select version from model_eval_migrations order by version`
      expect(rows.map((r) => r.version)).toEqual(MIGRATIONS.map((m) => m.version))
    } finally {
      await Promise.all([a.close(), b.close()])
    }
  })
})
