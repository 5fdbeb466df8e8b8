// The nats-server configuration the official NATS Helm chart (nats-io/k8s, helm/charts/nats) writes from its values,
// reproduced from its documented behaviour (the chart is not run here: no registry here serves it). What is modelled
// is what deploy/nats/official-chart-values.yaml relies on:
// - the base configuration the chart writes for a single server with JetStream and monitoring;
// - `config.merge` merged over it map by map (sprig's mergeOverwrite: a map merges, any other value replaces);
// - the result written as JSON with sorted keys (Go's encoding of a map), where a key ending in `$include` becomes
//   `include <path>;` in place and a string `<< x >>` is written unquoted;
// - the reloader's file list: nats.conf, then every `$include` path resolved against nats.conf's directory, then the
//   arguments `reloader.patch` appends.
// Several values files merge map by map too (helm -f a.yaml -f b.yaml), which valuesMerge does.
import { posix } from 'node:path'

type Json = null | boolean | number | string | Json[] | { [key: string]: Json }
type Obj = { [key: string]: Json }

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v)

/** Maps merged key by key, later winning; lists and scalars replaced whole. */
export function valuesMerge(...docs: unknown[]): Obj {
  const out: Obj = {}
  for (const doc of docs) {
    if (!isObj(doc)) continue
    for (const [k, v] of Object.entries(doc)) {
      const prev = out[k]
      out[k] = isObj(prev) && isObj(v) ? valuesMerge(prev, v) : structuredClone(v)
    }
  }
  return out
}

const get = (o: unknown, path: string): unknown =>
  path.split('.').reduce<unknown>((v, k) => (isObj(v) ? v[k] : undefined), o)

/** The configuration the chart's config template writes before the merge (the keys our values can reach). */
function baseConfig(values: Obj): Obj {
  const conf: Obj = {
    server_name: '<< $SERVER_NAME >>',
    lame_duck_grace_period: '10s',
    lame_duck_duration: '30s',
    pid_file: '/var/run/nats/nats.pid',
    port: (get(values, 'config.nats.port') as number | undefined) ?? 4222,
  }
  if (get(values, 'config.monitor.enabled') !== false) {
    conf.http_port = (get(values, 'config.monitor.port') as number | undefined) ?? 8222
  }
  if (get(values, 'config.jetstream.enabled') === true) {
    const size = (get(values, 'config.jetstream.fileStore.maxSize') ??
      get(values, 'config.jetstream.fileStore.pvc.size') ??
      '10Gi') as string
    conf.jetstream = {
      store_dir: (get(values, 'config.jetstream.fileStore.dir') as string | undefined) ?? '/data',
      max_file_store: `<< ${size} >>`,
    }
  }
  return conf
}

function sortKeys(v: Json): Json {
  if (Array.isArray(v)) return v.map(sortKeys)
  if (!isObj(v)) return v
  return Object.fromEntries(
    Object.keys(v)
      .sort()
      .map((k) => [k, sortKeys(v[k] as Json)]),
  )
}

/** nats.conf as the chart's ConfigMap holds it, for these (merged) values. */
export function chartNatsConf(values: Obj): string {
  const merged = valuesMerge(baseConfig(values), get(values, 'config.merge') ?? {})
  return JSON.stringify(sortKeys(merged), null, 2)
    .replace(/".*\$include": "(.*)",?/g, 'include $1;')
    .replace(/"<<\s+(.*?)\s+>>"/g, '$1')
}

/** Every `$include` path in the merged configuration, in key order. */
function includes(v: unknown): string[] {
  if (!isObj(v)) return []
  return Object.keys(v)
    .sort()
    .flatMap((k) => (k.endsWith('$include') ? [String(v[k])] : includes(v[k])))
}

/** The files the chart's config reloader watches (its `-config` arguments), nats.conf at /etc/nats-config. */
export function reloaderFiles(values: Obj): string[] {
  const dir = '/etc/nats-config'
  const files = [
    `${dir}/nats.conf`,
    ...includes(valuesMerge(baseConfig(values), get(values, 'config.merge') ?? {})).map((p) =>
      posix.normalize(posix.join(dir, p)),
    ),
  ]
  const added = ((get(values, 'reloader.patch') as Obj[] | undefined) ?? [])
    .filter((op) => op.op === 'add' && op.path === '/args/-')
    .map((op) => String(op.value))
  for (let i = 0; i + 1 < added.length; i++) if (added[i] === '-config') files.push(added[i + 1] as string)
  return files
}
