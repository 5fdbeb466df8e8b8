// The real KEDA operator (built by dev/scripts/install-binaries.sh) as a local process against the test environment:
// admin kubeconfig, one watched namespace, every listener on a free loopback port, no leader election, no cert
// rotation (the gRPC metrics service gets a throwaway certificate), no webhook/APIService patching. It runs in its
// own process group under a reaper (test/env/supervisor.ts), so it cannot outlive the test file that started it.
import { mkdir, mkdtemp, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { waitFor } from '../../env/exec.js'
import { freePorts, httpGet, LOOPBACK } from '../../env/net.js'
import { createPki } from '../../env/pki.js'
import { Reaper, type ServerProcess, startServer, whileRunning } from '../../env/supervisor.js'

export interface KedaOperator {
  /** http://127.0.0.1:<port>/metrics: KEDA's Prometheus metrics (keda_scaler_active, keda_scaler_metrics_value…). */
  metricsUrl: string
  process: ServerProcess
  /** The last lines of its log (for failure messages). */
  logTail(lines?: number): string
  /** The operator's metrics, parsed: one sample per series. */
  metrics(): Promise<MetricSample[]>
  stop(): Promise<void>
}

export interface MetricSample {
  name: string
  labels: Record<string, string>
  value: number
}

export interface KedaOperatorOptions {
  binary: string
  kubeconfigPath: string
  /** WATCH_NAMESPACE (and the namespace for its cluster objects and events). */
  namespace: string
  /**
   * PEM CA certificates the scalers trust (KEDA's `--ca-dir`, /custom/ca in a KEDA install). None by default: the
   * overlay's triggers read the NATS monitoring endpoint over plain HTTP, and the operator must not pick up the
   * host's /custom/ca.
   */
  trustedCas?: string
}

export async function startKedaOperator(opts: KedaOperatorOptions): Promise<KedaOperator> {
  const dir = await mkdtemp(join(tmpdir(), 'keda-operator-'))
  const reaper = new Reaper()
  reaper.removeDir(dir)
  try {
    // The gRPC metrics service (what KEDA's metrics apiserver would call) refuses to start without mTLS material:
    // ca.crt, tls.crt, tls.key in --cert-dir. A throwaway PKI's serving certificate (SAN 127.0.0.1) will do.
    const pki = await createPki(join(dir, 'certs'))
    await symlink(pki.apiserverCert, join(pki.dir, 'tls.crt'))
    await symlink(pki.apiserverKey, join(pki.dir, 'tls.key'))
    const caDir = join(dir, 'ca')
    await mkdir(caDir)
    if (opts.trustedCas) await writeFile(join(caDir, 'cluster-ca.crt'), opts.trustedCas)

    const [metricsPort, probePort, grpcPort] = (await freePorts(3)) as [number, number, number]
    const proc = startServer(
      reaper,
      'keda-operator',
      opts.binary,
      [
        `--metrics-bind-address=${LOOPBACK}:${metricsPort}`,
        `--health-probe-bind-address=${LOOPBACK}:${probePort}`,
        `--metrics-service-bind-address=${LOOPBACK}:${grpcPort}`,
        '--leader-elect=false',
        '--enable-cert-rotation=false',
        `--cert-dir=${pki.dir}`,
        `--ca-dir=${caDir}`,
        '--enable-webhook-patching=false',
        '--enable-apiservice-patching=false',
        '--zap-log-level=info',
      ],
      {
        cwd: dir,
        logPath: join(dir, 'keda-operator.log'),
        env: {
          ...process.env,
          KUBECONFIG: opts.kubeconfigPath,
          WATCH_NAMESPACE: opts.namespace,
          KEDA_CLUSTER_OBJECT_NAMESPACE: opts.namespace,
          POD_NAMESPACE: opts.namespace,
        },
      },
    )
    await whileRunning(
      proc,
      waitFor(
        'keda-operator /readyz',
        async () => (await httpGet(`http://${LOOPBACK}:${probePort}/readyz`)).status === 200,
        { timeoutMs: 60_000, intervalMs: 200 },
      ),
    )
    const metricsUrl = `http://${LOOPBACK}:${metricsPort}/metrics`
    return {
      metricsUrl,
      process: proc,
      logTail: (lines) => proc.logTail(lines),
      metrics: async () => parsePrometheus((await httpGet(metricsUrl)).body),
      stop: () => reaper.reap(),
    }
  } catch (err) {
    await reaper.reap()
    throw err
  }
}

/** The Prometheus text format, enough of it for KEDA's gauges and counters (no escaped quotes in its labels). */
export function parsePrometheus(text: string): MetricSample[] {
  const samples: MetricSample[] = []
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line)
    if (!m) continue
    const labels: Record<string, string> = {}
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"/g))
      labels[l[1] as string] = l[2] as string
    samples.push({ name: m[1] as string, labels, value: Number(m[3]) })
  }
  return samples
}
