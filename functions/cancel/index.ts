// cancel: owns Job deletion. A cancel request deletes the attempt's Job first — no read stands between the
// foreground signal and the DELETE — and only then records the transition (Cancelling, preemption counted).
import type { CancelReason } from '../../core/api.js'
import { REASONS } from '../../core/api.js'
import { STREAM_EVENTS } from '../../events/catalog.js'
import { type EventFunction, PermanentError } from '../../runtime/function.js'
import { reconcile } from '../../runtime/reconcile.js'

const isCancelReason = (r: string): r is CancelReason => (REASONS.Cancelling as readonly string[]).includes(r)

export const cancel: EventFunction = {
  name: 'cancel',
  concurrency: 16,
  subscriptions: [{ stream: STREAM_EVENTS, subjects: ['flexinfer.events.backfill.cancel'] }],
  async handle(event, deps) {
    if (event.type !== 'ai.flexinfer.backfill.cancel') return
    const { namespace, backfill, jobName, reason, at } = event.data
    if (!isCancelReason(reason)) throw new PermanentError(`unknown cancel reason "${reason}"`)
    const result = await deps.kube.deleteJob(namespace, jobName)
    deps.log.info({ namespace, backfill, job: jobName, reason, result }, 'cancel: job delete accepted')
    await reconcile(deps, 'cancel', namespace, backfill, { type: 'cancel', reason, at })
  },
}
