// Migrating a durable consumer to another ack policy (explicit → all for demand's, pkg/transport/ack-floor.ts).
// JetStream cannot change ack_policy in place, so the consumer is re-created under the same name (KEDA's triggers,
// the functions' NATS permissions and admit's fence name it), starting where the old one stopped:
//
// 1. The old consumer is paused: instances still bound to it keep acking what they hold, but get nothing new.
// 2. Up to `settleMs` for everything delivered to be acked (num_ack_pending 0).
// 3. It is deleted and the new one created with deliver_policy by_start_sequence at its ack floor + 1.
//
// Settled (the usual case, instances running the old release finish their batch): the floor is the last message
// delivered, so the new consumer starts at the first one never delivered: nothing lost, nothing delivered twice.
// Not settled (no instance running, or a message stuck in its retries): the messages above the floor — the
// delivered-but-unacked ones, and any acked out of order above the lowest unacked one — are delivered again by the
// new consumer. The unacked ones the old consumer would have redelivered too (nothing is lost); the acked ones
// are delivered a second time, which the log line counts (demand's handling of a request is idempotent).
//
// A crash between the delete and the create leaves no consumer: provision must be run again (it is a Job that
// retries), and would then create it from new messages on — the one window where events can be missed.
import {
  type ConsumerConfig,
  type ConsumerInfo,
  type ConsumerUpdateConfig,
  DeliverPolicy,
  type JetStreamManager,
} from '@nats-io/jetstream'
import type { Logger } from '../observability/log.js'
import { isNotFound } from './errors.js'

/** Default wait for the old consumer's in-flight messages: about one ack_wait of a function's consumer. */
export const MIGRATION_SETTLE_MS = 30_000
const POLL_MS = 100

/** Runs one idempotent server call, asking it again when no leader answered (provisioning's acrossLeaderChange). */
export type Retried = <T>(call: () => Promise<T>) => Promise<T>

export interface MigrationResult {
  /** First stream sequence the new consumer delivers. */
  startSeq: number
  /** True when everything delivered had been acked: an exact hand-over. */
  settled: boolean
  /** Messages above the floor that the new consumer delivers again (some may have been handled). */
  redelivered: number
}

export async function migrateAckPolicy(
  jsm: JetStreamManager,
  old: ConsumerInfo,
  config: Partial<ConsumerConfig> & ConsumerUpdateConfig & { durable_name: string },
  opts: { log?: Logger; settleMs?: number; retried?: Retried } = {},
): Promise<MigrationResult> {
  // Each call below is safe to ask again: a pause or a read repeated, a delete already done, an add with one config.
  const retried = opts.retried ?? ((call) => call())
  const stream = old.stream_name
  const name = config.durable_name
  const settleMs = opts.settleMs ?? MIGRATION_SETTLE_MS
  const log = opts.log?.child({ stream, consumer: name })
  log?.info(
    { from: old.config.ack_policy, to: config.ack_policy },
    'migrating a durable consumer to another ack policy',
  )
  // Pause until well past the wait (a crashed migration's pause ends by itself).
  const until = new Date(Date.now() + settleMs + 60_000)
  await retried(() => jsm.consumers.pause(stream, name, until))
  const read = () => retried(() => jsm.consumers.info(stream, name))
  let info = await read()
  const deadline = Date.now() + settleMs
  while (info.num_ack_pending > 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, POLL_MS))
    info = await read()
  }
  const floor = info.ack_floor.stream_seq
  const result: MigrationResult = {
    startSeq: floor + 1,
    settled: info.num_ack_pending === 0,
    redelivered: Math.max(0, info.delivered.stream_seq - floor),
  }
  await retried(() => jsm.consumers.delete(stream, name)).catch((err) => {
    if (!isNotFound(err)) throw err
  })
  await retried(() =>
    jsm.consumers.add(stream, {
      ...config,
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: result.startSeq,
    }),
  )
  const context = { ...result, unacked: info.num_ack_pending }
  if (result.settled) log?.info(context, 'consumer migrated: exact hand-over at the first undelivered message')
  else
    log?.warn(
      context,
      'consumer migrated with messages still unacked: those above the ack floor are delivered again by the new one',
    )
  return result
}
