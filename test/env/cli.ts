// npm run env:up / env:down: a persistent local environment under .testenv/ that outlives this command.
import { existsSync } from 'node:fs'
import { rm } from 'node:fs/promises'
import { join, relative } from 'node:path'
import { repoRoot } from './binaries.js'
import {
  belongsTo,
  type EnvironmentInfo,
  readEnvironmentInfo,
  startEnvironment,
  stopEnvironment,
} from './environment.js'
import { processesMentioning } from './exec.js'
import { natsClusterFromEnv } from './nats.js'

const dir = join(repoRoot, '.testenv')
const rel = relative(process.cwd(), dir) || '.'

function running(info: EnvironmentInfo): EnvironmentInfo['processes'] {
  return info.processes.filter((p) => belongsTo(p.pid, info.dir))
}

async function up(natsCluster: boolean, node: boolean, engine: boolean): Promise<void> {
  const info = await readEnvironmentInfo(dir)
  if (info) {
    const alive = running(info)
    const same =
      Boolean(info.natsCluster) === natsCluster && Boolean(info.node) === node && Boolean(info.engine) === engine
    if (alive.length === info.processes.length && same) {
      console.log(`The environment is already up (${alive.map((p) => `${p.name} ${p.pid}`).join(', ')}).`)
      printUsage(info)
      return
    }
    console.log(
      alive.length === info.processes.length
        ? `The environment in ${rel} runs another mode (NATS cluster, node or engine); stopping it and starting fresh.`
        : `A previous environment in ${rel} is partly gone; stopping what is left and starting fresh.`,
    )
    await stopEnvironment(info)
  }
  await stopStragglers()
  if (existsSync(dir)) await rm(dir, { recursive: true, force: true })
  const env = await startEnvironment({ dir, detached: true, natsCluster, node: node && { appImage: true }, engine })
  console.log(
    `Environment up in ${(env.startupMs / 1000).toFixed(1)}s: Kubernetes ${env.kubernetesVersion}, nats-server ${env.natsServerVersion}`,
  )
  printUsage(env)
}

function printUsage(info: EnvironmentInfo): void {
  console.log(`
  apiserver   ${info.apiserverUrl}
  NATS        ${natsLines(info)}
  CRDs        ${info.crds.length > 0 ? info.crds.join(', ') : '(none in crds/)'}${nodeLines(info)}${engineLines(info)}
  logs        ${relative(process.cwd(), join(info.dir, 'logs'))}/

Use it from a shell:
  . ${relative(process.cwd(), info.envShPath)}
  kubectl get --raw /version
  nats stream ls

Stop it: npm run env:down`)
}

function nodeLines(info: EnvironmentInfo): string {
  const n = info.node
  if (!n) return ''
  return `
  node        ${n.name}: kubelet, kube-scheduler, kube-proxy, containerd (ctr: CONTAINERD_ADDRESS in env.sh)
  pods        ${n.podCidr} on bridge ${n.bridge} (host ${n.hostIp}; no route off this machine), DNS ${n.hostIp}
  images      ${[n.images.pause.ref, n.images.busybox.ref, n.images.app?.ref].filter(Boolean).join(', ')}`
}

function engineLines(info: EnvironmentInfo): string {
  const e = info.engine
  if (!e) return ''
  const servers = e.servers.map(
    (s) =>
      `\n    ${s.api.padEnd(11)} ${s.model} at ${s.url}${s.nodeUrl ? ` (pods: ${s.nodeUrl})` : ''}  (ENGINE_${s.api.toUpperCase()}_URL)`,
  )
  return `\n  engine      ${e.build}, ${e.threads} thread(s) and ${e.slots} slots per server${servers.join('')}`
}

function natsLines(info: EnvironmentInfo): string {
  const servers = info.natsServers ?? []
  if (!info.natsCluster) return `${info.natsUrl}  (monitoring ${info.natsMonitorUrl})`
  return [
    `${servers.length}-server JetStream cluster (NATS_REPLICAS=${servers.length} for npm start)`,
    ...servers.map((s) => `    ${s.name}  ${s.url}  (monitoring ${s.monitorUrl})`),
  ].join('\n')
}

async function down(): Promise<void> {
  const info = await readEnvironmentInfo(dir)
  if (info) {
    const alive = running(info)
    await stopEnvironment(info)
    console.log(alive.length > 0 ? `Stopped ${alive.map((p) => p.name).join(', ')}.` : 'Nothing was running.')
  } else {
    console.log(`No environment recorded in ${rel}.`)
  }
  await stopStragglers()
  await rm(dir, { recursive: true, force: true })
}

/** Servers still running from .testenv/ without a record (e.g. env.json lost): stop them too. */
async function stopStragglers(): Promise<void> {
  const stray = processesMentioning(`${dir}/`).filter((p) => p.pid !== process.pid)
  if (stray.length === 0) return
  console.log(`Stopping unrecorded processes from ${rel}: ${stray.map((p) => p.pid).join(', ')}`)
  await stopEnvironment({ dir, processes: stray.map((p) => ({ name: p.cmd, pid: p.pid, logPath: '' })) })
}

const command = process.argv[2]
// --nats-cluster (or MBF_NATS_CLUSTER=1): three nats-servers with routes instead of one.
const natsCluster = process.argv.includes('--nats-cluster') || natsClusterFromEnv()
// --node: a real node (kubelet, containerd, kube-proxy, DNS) so pods run; needs root (test/env/node.ts).
const node = process.argv.includes('--node')
// --engine: llama-server with two small real models (test/env/engine.ts).
const engine = process.argv.includes('--engine')
try {
  if (command === 'up') await up(natsCluster, node, engine)
  else if (command === 'down') await down()
  else {
    console.error('usage: tsx test/env/cli.ts up [--nats-cluster] [--node] [--engine]|down')
    process.exitCode = 2
  }
} catch (err) {
  console.error(err instanceof Error ? err.message : err)
  process.exitCode = 1
}
