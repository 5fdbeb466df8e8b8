// The ModelBackfill API (ai.flexinfer/v1alpha2): one zod schema is the source of truth for what the functions
// validate and for the CRD's openAPIV3Schema (`npm run gen:crds`). CEL rules travel as zod metadata
// (`x-kubernetes-validations`) so `kubectl apply` refuses what the functions would block anyway.
import { z } from 'zod'
import { DurationError, parseDuration } from './duration.js'
import { isObjectName } from './names.js'
import { ATTEMPT_ENV, RUN_ID_ENV } from './run.js'

export const GROUP = 'ai.flexinfer'
export const VERSION = 'v1alpha2'
export const API_VERSION = `${GROUP}/${VERSION}`
export const FINALIZER = 'ai.flexinfer/modelbackfill'
export const RESERVED_ENV = 'FLEXINFER_WORKLOAD_CLASS'
/** Every variable the controller sets in the attempt's containers, and what it sets: spec.env may name none. */
export const RESERVED_ENVS: readonly { name: string; setTo: string }[] = [
  { name: RESERVED_ENV, setTo: 'background' },
  { name: RUN_ID_ENV, setTo: "the run's identity" },
  { name: ATTEMPT_ENV, setTo: "the attempt's number within its run" },
]
export const MAX_ENV = 32
export const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/
export const MIN_REPEAT_AFTER_MS = 60_000
export const DEFAULT_IDLE_FOR = '10m'
export const DEFAULT_MAX_RUN_DURATION = '30m'

export const PHASES = [
  'WaitingForIdle',
  'Starting',
  'Running',
  'Cancelling',
  'Succeeded',
  'Failed',
  'Suspended',
  'Blocked',
] as const
export type Phase = (typeof PHASES)[number]

/** status.reason vocabulary per phase, exactly as contract.md pins it. */
export const REASONS = {
  WaitingForIdle: ['ModelNotReady', 'IdleWindow', 'NodeUnresolved', 'RepeatDue'],
  Starting: ['JobCreated'],
  Running: ['JobRunning'],
  Cancelling: [
    'ForegroundDemand',
    'GamingIntent',
    'GPULeaseActive',
    'Suspended',
    'SpecChanged',
    'ModelNotFound',
    'ModelNotReady',
    'NodeChanged',
    'NodeUnresolved',
    // An addition to the contract's vocabulary: the fail-safe cancelled the attempt because foreground demand could
    // not be observed (NATS unreachable, demand not pulling) for longer than its bound (pkg/core/fail-safe.ts failSafe).
    'ForegroundUnobservable',
  ],
  Succeeded: ['JobComplete', 'RepeatScheduled', 'RepeatCleanup'],
  Failed: ['JobFailed'],
  Suspended: ['Suspended'],
  Blocked: [
    'ModelNotFound',
    'TemplateNotFound',
    'GPURequestForbidden',
    'InvalidEnvironment',
    'InvalidRepeatAfter',
    'RepeatStateInvalid',
    'GamingIntent',
    'GPULeaseActive',
    'ConcurrentBackfill',
    // An addition to the contract's vocabulary: the apiserver refused the attempt's Job (quota, webhook, invalid).
    'JobRejected',
  ],
} as const satisfies Record<Phase, readonly string[]>
export type Reason<P extends Phase = Phase> = (typeof REASONS)[P][number]
export type CancelReason = (typeof REASONS)['Cancelling'][number]

/**
 * CEL: Go duration syntax as Kubernetes' `duration()` parses it (sign allowed here, refused by its own rule so the
 * user reads "must not be negative" rather than a syntax error). `duration()` raises an evaluation error on bad
 * syntax, so every rule that calls it is guarded by this match.
 */
const GO_DURATION_RE = '^[-+]?(0|([0-9]*[.]?[0-9]+(ns|us|µs|μs|ms|s|m|h))+)$'
/** Bounds strings CEL rules read, so the apiserver's cost estimator accepts the rules. */
export const MAX_DURATION_LENGTH = 64
export const MAX_NAME_LENGTH = 253
const durationField = (field: string, description: string, extraRules: { rule: string; message: string }[] = []) =>
  z
    .string()
    .min(1)
    .max(MAX_DURATION_LENGTH)
    .meta({
      description,
      'x-kubernetes-validations': [
        {
          // The duration() half turns what the syntax allows but Go cannot represent (e.g. 9999999999h, past
          // ~292 years) into a refusal too; `&&` short-circuits on false, so bad syntax never reaches it.
          rule: `self.matches('${GO_DURATION_RE}') && duration(self) == duration(self)`,
          message: `${field} must be a duration such as 90s, 15m or 1h30m`,
        },
        { rule: `!self.startsWith('-')`, message: `${field} must not be negative` },
        ...extraRules,
      ],
    })

const nameRef = (field: string, what: string, description: string) =>
  z
    .string()
    .min(1)
    .max(MAX_NAME_LENGTH)
    .meta({
      description,
      'x-kubernetes-validations': [{ rule: 'self.size() > 0', message: `${field} must name a ${what}` }],
    })

export const ModelBackfillSpec = z
  .object({
    modelRef: nameRef(
      'modelRef',
      'Model in the same namespace',
      'Name of the Model (same namespace) whose idle time is used.',
    ),
    templateRef: nameRef(
      'templateRef',
      'CronJob in the same namespace',
      'Name of a CronJob in the same namespace whose jobTemplate is copied for each attempt.',
    ),
    idleFor: durationField(
      'idleFor',
      'Continuous foreground-idle window required before an attempt; 0 means the default (10m).',
    ).default(DEFAULT_IDLE_FOR),
    maxRunDuration: durationField(
      'maxRunDuration',
      "Becomes the Job's activeDeadlineSeconds; 0 means the default (30m).",
    ).default(DEFAULT_MAX_RUN_DURATION),
    repeatAfter: durationField('repeatAfter', 'Cooldown after a successful run; 0 or absent keeps it one-shot.', [
      {
        rule: `!self.matches('${GO_DURATION_RE}') || self.startsWith('-') || duration(self) == duration('0s') || duration(self) >= duration('1m')`,
        message: 'repeatAfter must be 0 (one-shot) or at least 1m',
      },
    ]).optional(),
    env: z
      .record(z.string(), z.string())
      .meta({
        description: `Literal environment overrides for every container (at most ${MAX_ENV}).`,
        'x-kubernetes-validations': [
          { rule: `self.size() <= ${MAX_ENV}`, message: `env may have at most ${MAX_ENV} entries` },
          {
            rule: `self.all(k, k.matches('${ENV_NAME.source}'))`,
            message:
              'env names must match ^[A-Za-z_][A-Za-z0-9_]*$ (letters, digits, underscore; not starting with a digit)',
          },
          ...RESERVED_ENVS.map(({ name, setTo }) => ({
            rule: `!('${name}' in self)`,
            message: `${name} is reserved: the controller always sets it to ${setTo}`,
          })),
        ],
      })
      .optional(),
    suspend: z.boolean().optional().meta({ description: 'Cancels any running attempt and admits no new one.' }),
  })
  .meta({ description: 'ModelBackfillSpec declares opportunistic background work on a warm model.' })
export type ModelBackfillSpec = z.infer<typeof ModelBackfillSpec>

const Time = z.string().meta({ format: 'date-time' })
const time = (description: string) => Time.meta({ description })

export const Condition = z
  .object({
    type: z.string().meta({ description: 'Condition type; the controller sets Ready.' }),
    status: z.enum(['True', 'False', 'Unknown']).meta({ description: 'True, False or Unknown.' }),
    reason: z.string().optional().meta({ description: 'The status.reason the condition was last set with.' }),
    message: z.string().optional().meta({ description: 'Human-readable detail, as status.message.' }),
    lastTransitionTime: time('When status last changed between True and False.').optional(),
    observedGeneration: z
      .number()
      .int()
      .optional()
      .meta({ description: 'metadata.generation the condition was set for.' }),
  })
  .meta({ description: 'A standard Kubernetes condition.' })
export type Condition = z.infer<typeof Condition>

export const ModelBackfillStatus = z
  .object({
    phase: z
      .enum(PHASES)
      .optional()
      .meta({
        description:
          'Lifecycle phase: WaitingForIdle, Starting, Running, Cancelling, Succeeded, Failed, ' +
          'Suspended or Blocked.',
      }),
    reason: z.string().optional().meta({ description: 'Machine-readable reason for the phase (contract vocabulary).' }),
    message: z.string().optional().meta({ description: 'Human-readable detail of the phase and reason.' }),
    observedGeneration: z
      .number()
      .int()
      .optional()
      .meta({ description: 'metadata.generation of the spec this status was decided for.' }),
    nodeName: z.string().optional().meta({ description: "The model's node for the current or last attempt." }),
    jobName: z.string().optional().meta({ description: 'The owned Job of the current or last attempt.' }),
    idleSince: time('Start of the current continuous foreground-idle window.').optional(),
    startedAt: time('When the current or last Job was created.').optional(),
    completionTime: time('When the last attempt reached a terminal state.').optional(),
    nextRunTime: time('With repeatAfter: when a succeeded declaration may re-enter idle admission.').optional(),
    attempts: z.number().int().optional().meta({ description: 'Jobs created so far (every attempt counts).' }),
    runId: z.string().max(64).optional().meta({
      description:
        "Identity of the current or last run (every attempt until the work Succeeds or Fails, or the spec changes): the attempts' FLEXINFER_RUN_ID.",
    }),
    runAttempt: z
      .number()
      .int()
      .optional()
      .meta({ description: "The current or last attempt's number within its run: its FLEXINFER_ATTEMPT." }),
    runDone: z.number().int().optional().meta({
      description:
        "Items of the run done, as its attempts' termination messages last reported them (shown once one was read).",
    }),
    runTotal: z.number().int().optional().meta({ description: 'Items of the run in all, as last reported.' }),
    runDiscarded: z.number().int().optional().meta({
      description: "Items the run's preempted attempts reported in flight when they were stopped: thrown away.",
    }),
    conditions: z
      .array(Condition)
      .meta({
        description: 'Ready is True only while Running or Succeeded.',
        'x-kubernetes-list-type': 'map',
        'x-kubernetes-list-map-keys': ['type'],
      })
      .optional(),
  })
  .meta({ description: 'ModelBackfillStatus is written only by the controller functions.' })
export type ModelBackfillStatus = z.infer<typeof ModelBackfillStatus>

export interface ObjectMeta {
  name: string
  namespace: string
  uid?: string
  generation?: number
  resourceVersion?: string
  deletionTimestamp?: string
  finalizers?: string[]
  labels?: Record<string, string>
  annotations?: Record<string, string>
}

export interface ModelBackfill {
  apiVersion?: string
  kind?: string
  metadata: ObjectMeta
  spec: ModelBackfillSpec
  status?: ModelBackfillStatus
}

/** A spec problem the functions block on (defence in depth behind the CRD's CEL rules). */
export interface SpecProblem {
  reason: 'InvalidEnvironment' | 'InvalidRepeatAfter' | 'ModelNotFound' | 'TemplateNotFound'
  message: string
}

export interface ResolvedSpec {
  idleForMs: number
  maxRunDurationMs: number
  repeatAfterMs: number
}

/** A ref as it may be shown in a status message: quoted (control characters escaped), long ones shortened. */
const shown = (ref: unknown) => {
  const text = JSON.stringify(String(ref))
  return text.length > 80 ? `${text.slice(0, 64)}…" (${String(ref).length} characters)` : text
}

/** A ref no Model/CronJob can have is never looked up: that object cannot exist, so it is "not found" for good. */
function checkRefs(spec: ModelBackfillSpec): SpecProblem | undefined {
  const rule = 'lower-case letters, digits, "-" and "." (a DNS subdomain), at most 253 characters'
  if (!isObjectName(spec.modelRef)) {
    return {
      reason: 'ModelNotFound',
      message: `modelRef ${shown(spec.modelRef)} is not a valid Kubernetes object name (${rule}); no Model can have it`,
    }
  }
  if (!isObjectName(spec.templateRef)) {
    return {
      reason: 'TemplateNotFound',
      message: `templateRef ${shown(spec.templateRef)} is not a valid Kubernetes object name (${rule}); no CronJob can have it`,
    }
  }
  return undefined
}

/** Validates what CEL also checks, for objects admitted before the CRD had the rules. */
export function checkSpec(spec: ModelBackfillSpec): { problem: SpecProblem } | { resolved: ResolvedSpec } {
  const badRef = checkRefs(spec)
  if (badRef) return { problem: badRef }
  const env = spec.env ?? {}
  const names = Object.keys(env)
  if (names.length > MAX_ENV) {
    return { problem: { reason: 'InvalidEnvironment', message: `env has ${names.length} entries; at most ${MAX_ENV}` } }
  }
  const bad = names.filter((n) => !ENV_NAME.test(n)).sort()
  if (bad.length) {
    return {
      problem: { reason: 'InvalidEnvironment', message: `invalid environment variable name(s): ${bad.join(', ')}` },
    }
  }
  const reserved = RESERVED_ENVS.find(({ name }) => name in env)
  if (reserved) {
    return {
      problem: { reason: 'InvalidEnvironment', message: `${reserved.name} is reserved and cannot be overridden` },
    }
  }
  let repeatAfterMs = 0
  try {
    repeatAfterMs = spec.repeatAfter ? parseDuration(spec.repeatAfter) : 0
  } catch (err) {
    return { problem: { reason: 'InvalidRepeatAfter', message: `repeatAfter: ${(err as Error).message}` } }
  }
  if (repeatAfterMs < 0 || (repeatAfterMs > 0 && repeatAfterMs < MIN_REPEAT_AFTER_MS)) {
    return {
      problem: { reason: 'InvalidRepeatAfter', message: `repeatAfter ${spec.repeatAfter} must be 0 or at least 1m` },
    }
  }
  // idleFor / maxRunDuration have defaults; a bad value left by an old CRD falls back to the default rather
  // than wedging the declaration, since no Blocked reason exists for them. Zero means the default too, as in the
  // reference controller, which writes `0s` back into the objects it manages (a takeover must not run them at once).
  const orDefault = (value: string | undefined, fallback: string) => {
    try {
      const ms = parseDuration(value ?? fallback)
      return ms > 0 ? ms : parseDuration(fallback)
    } catch (err) {
      if (err instanceof DurationError) return parseDuration(fallback)
      throw err
    }
  }
  return {
    resolved: {
      idleForMs: orDefault(spec.idleFor, DEFAULT_IDLE_FOR),
      maxRunDurationMs: orDefault(spec.maxRunDuration, DEFAULT_MAX_RUN_DURATION),
      repeatAfterMs,
    },
  }
}
