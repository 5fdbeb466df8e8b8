// The durable store, when DATABASE_URL names one (a connection string from a Secret): the run's items and attempts
// for resumption, and one row per run and model appended with its provenance. postgres.js with tagged templates
// only: every value is a bound parameter, never SQL text. The schema is the workload's own, created if missing by
// versioned migrations applied under an advisory lock (two attempts starting at once apply each migration once).
import postgres from 'postgres'
import { withDeadline } from '../../pkg/lib/deadline.js'
import { modelArtifacts } from './artifact.js'
import type { ArtifactSink, ProgressStore } from './attempt.js'
import type { AssembledRun, ItemRecord } from './items.js'
import type { Settings } from './settings.js'

/** Each migration once, in order; a deployed version is never edited, a change is a new one. */
export const MIGRATIONS: { version: number; apply: (sql: postgres.TransactionSql) => Promise<unknown> }[] = [
  {
    version: 1,
    apply: async (sql) => {
      await sql`create table model_eval_attempts (
        run_id text not null,
        attempt integer not null,
        started_at timestamptz not null default now(),
        primary key (run_id, attempt)
      )`
      await sql`create table model_eval_items (
        run_id text not null,
        item_id text not null,
        attempt integer not null,
        started_at timestamptz not null,
        ms integer not null,
        result jsonb not null,
        primary key (run_id, item_id)
      )`
      await sql`create table model_eval_runs (
        id bigserial primary key,
        recorded_at timestamptz not null default now(),
        run_id text not null,
        model text not null,
        engine text not null,
        reported jsonb not null,
        settings jsonb not null,
        probe_set_version text not null,
        attempts integer not null,
        attempt_numbers integer[] not null,
        items_total integer not null,
        items_by_attempt jsonb not null,
        started_at timestamptz not null,
        finished_at timestamptz not null,
        verdict_pass boolean not null,
        verdict jsonb not null,
        probes jsonb not null,
        benchmark jsonb not null,
        error jsonb,
        unique (run_id, model)
      )`
    },
  },
  {
    // The benchmark's concurrency and the gate it went through: a row is read against the cap that bounded it.
    version: 2,
    apply: async (sql) => {
      await sql`alter table model_eval_runs
        add column concurrency integer,
        add column gate_max_in_flight integer,
        add column gate jsonb`
    },
  },
]

/** Any one lock id of this workload's own (pg_advisory_xact_lock takes a bigint): "mbf-eval" in ASCII. */
const MIGRATION_LOCK = 0x6d62662d6576616cn
export const PG_DEADLINE_MS = 15_000

export class PostgresStores implements ProgressStore {
  readonly sql: postgres.Sql

  constructor(
    url: string,
    private readonly settings: Settings,
  ) {
    this.sql = postgres(url, {
      max: 2,
      connect_timeout: 10,
      idle_timeout: 5,
      onnotice: () => {},
      // The server ends a statement that runs longer than this: no query holds the attempt past its deadline.
      connection: { statement_timeout: PG_DEADLINE_MS, application_name: 'model-eval' },
    })
  }

  private q<T>(call: Promise<T>, what: string): Promise<T> {
    return withDeadline(call, PG_DEADLINE_MS, `PostgreSQL ${what}`)
  }

  /** Creates the schema if missing and applies the migrations it lacks; returns the versions applied now. */
  async migrate(): Promise<number[]> {
    return this.q(
      this.sql.begin(async (tx) => {
        await tx`select pg_advisory_xact_lock(${MIGRATION_LOCK.toString()}::bigint)`
        await tx`create table if not exists model_eval_migrations (
          version integer primary key,
          applied_at timestamptz not null default now()
        )`
        const rows = await tx<{ version: number }[]>`select version from model_eval_migrations`
        const have = new Set(rows.map((r) => r.version))
        const applied: number[] = []
        for (const m of MIGRATIONS) {
          if (have.has(m.version)) continue
          await m.apply(tx)
          await tx`insert into model_eval_migrations (version) values (${m.version})`
          applied.push(m.version)
        }
        return applied
      }) as Promise<number[]>,
      'migrations',
    )
  }

  async begin(runId: string, attempt: number) {
    await this.q(
      this.sql`insert into model_eval_attempts (run_id, attempt) values (${runId}, ${attempt}) on conflict do nothing`,
      'attempt',
    )
    const { records, attempts } = await this.records(runId)
    const [row] = await this.q(
      this.sql<{ n: number }[]>`select count(*)::int as n from model_eval_runs where run_id = ${runId}`,
      'runs',
    )
    return { records, attempts, published: (row?.n ?? 0) >= this.settings.models.length }
  }

  async record(runId: string, r: ItemRecord): Promise<boolean> {
    const rows = await this.q(
      this.sql`insert into model_eval_items (run_id, item_id, attempt, started_at, ms, result)
        values (${runId}, ${r.id}, ${r.attempt}, ${r.startedAt}, ${r.ms}, ${this.sql.json(r.result as postgres.JSONValue)})
        on conflict do nothing returning item_id`,
      'item',
    )
    return rows.length === 1
  }

  async records(runId: string) {
    const [items, attempts] = await Promise.all([
      this.q(
        this.sql<{ item_id: string; attempt: number; started_at: Date; ms: number; result: unknown }[]>`
          select item_id, attempt, started_at, ms, result from model_eval_items where run_id = ${runId}`,
        'items',
      ),
      this.q(
        this.sql<
          { attempt: number }[]
        >`select attempt from model_eval_attempts where run_id = ${runId} order by attempt`,
        'attempts',
      ),
    ])
    return {
      records: items.map((i) => ({
        id: i.item_id,
        attempt: i.attempt,
        startedAt: i.started_at.toISOString(),
        ms: i.ms,
        result: i.result,
      })),
      attempts: attempts.map((a) => a.attempt),
    }
  }

  /** The items stay: they are the run's evidence, and what a late duplicate attempt finds done. */
  async finish(): Promise<void> {}

  runSink(): ArtifactSink {
    return {
      name: 'postgres',
      publish: async (run: AssembledRun) => {
        let wrote = false
        const json = (v: unknown) => this.sql.json(v as postgres.JSONValue)
        for (const a of modelArtifacts(run, this.settings)) {
          const rows = await this.q(
            this.sql`insert into model_eval_runs (run_id, model, engine, reported, settings, probe_set_version,
                attempts, attempt_numbers, items_total, items_by_attempt, started_at, finished_at, verdict_pass,
                verdict, probes, benchmark, error, concurrency, gate_max_in_flight, gate)
              values (${a.runId}, ${a.model}, ${a.engine}, ${json(a.reported)}, ${json(a.settings)},
                ${a.probeSetVersion}, ${a.attempts.length}, ${a.attempts}, ${a.items.total}, ${json(a.items.byAttempt)},
                ${a.startedAt}, ${a.finishedAt}, ${a.verdict.pass}, ${json(a.verdict)}, ${json(a.probes)},
                ${json(a.benchmark)}, ${a.error ? json(a.error) : null}, ${a.concurrency.configured},
                ${a.concurrency.gateMaxInFlight}, ${a.gate ? json(a.gate) : null})
              on conflict (run_id, model) do nothing returning id`,
            'run row',
          )
          wrote ||= rows.length === 1
        }
        return wrote
      },
    }
  }

  async close(): Promise<void> {
    await this.sql.end({ timeout: 1 }).catch(() => {})
  }
}
