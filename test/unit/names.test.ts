// Deterministic names: the Job name is the idempotency key of an attempt, the label finds a backfill's Jobs.
import { createHash } from 'node:crypto'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { backfillKey, backfillLabelValue, jobName, modelKey } from '../../pkg/core/names.js'

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex')
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/

describe('jobName', () => {
  it('is <backfill>-<attempt>-<first 8 hex of sha256(backfill)>', () => {
    expect(jobName('model-eval-gemma4-5930k', 1)).toBe(
      `model-eval-gemma4-5930k-1-${sha256('model-eval-gemma4-5930k').slice(0, 8)}`,
    )
    expect(jobName('bf', 12)).toBe(`bf-12-${sha256('bf').slice(0, 8)}`)
  })

  it('hashes the backfill name as given, then lower-cases and maps anything outside [a-z0-9-] to "-"', () => {
    const hash = sha256('Eval.Gemma_4').slice(0, 8)
    expect(jobName('Eval.Gemma_4', 3)).toBe(`eval-gemma-4-3-${hash}`)
    expect(jobName('a.b.c', 1)).toBe(`a-b-c-1-${sha256('a.b.c').slice(0, 8)}`)
  })

  it('is deterministic and differs per attempt and per backfill', () => {
    expect(jobName('bf', 1)).toBe(jobName('bf', 1))
    expect(jobName('bf', 1)).not.toBe(jobName('bf', 2))
    expect(jobName('bf', 1)).not.toBe(jobName('bf2', 1))
  })

  it('stays within 63 characters for very long names, keeping attempt and hash', () => {
    const long = `${'a'.repeat(200)}.model-eval`
    const name = jobName(long, 1)
    expect(name.length).toBeLessThanOrEqual(63)
    expect(name).toMatch(DNS_LABEL)
    expect(name.endsWith(`-1-${sha256(long).slice(0, 8)}`)).toBe(true)
    expect(name.startsWith('aaaa')).toBe(true)
  })

  it('long names never collide across attempts or across backfills sharing a long prefix', () => {
    const base = 'x'.repeat(61)
    const names = new Set([1, 2, 10, 11, 100, 123456].map((n) => jobName(base, n)))
    expect(names.size).toBe(6)
    expect(jobName(`${'y'.repeat(70)}-one`, 1)).not.toBe(jobName(`${'y'.repeat(70)}-two`, 1))
  })

  it('a cut that ends on a "-" does not leave a double dash or a trailing one', () => {
    // 52 characters of prefix fit before "-1-xxxxxxxx" (11): put a dash exactly at the cut.
    const long = `${'a'.repeat(51)}-${'b'.repeat(20)}`
    const name = jobName(long, 1)
    expect(name).toBe(`${'a'.repeat(51)}-1-${sha256(long).slice(0, 8)}`)
    expect(name).toMatch(DNS_LABEL)
  })

  it('any Kubernetes object name (DNS subdomain, ≤ 253) yields a valid DNS label, one per attempt', () => {
    const segment = fc.stringMatching(/^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$/)
    const subdomain = fc
      .array(segment, { minLength: 1, maxLength: 6 })
      .map((parts) => parts.join('.').slice(0, 253))
      .filter((n) => /^[a-z0-9].*[a-z0-9]$|^[a-z0-9]$/.test(n))
    fc.assert(
      fc.property(subdomain, fc.integer({ min: 1, max: 1_000_000 }), (name, attempt) => {
        const job = jobName(name, attempt)
        expect(job.length).toBeLessThanOrEqual(63)
        expect(job).toMatch(DNS_LABEL)
        expect(job.endsWith(`-${attempt}-${sha256(name).slice(0, 8)}`)).toBe(true)
        expect(jobName(name, attempt + 1)).not.toBe(job)
      }),
      { numRuns: 300 },
    )
  })
})

describe('backfillLabelValue', () => {
  it('is the first 16 hex of sha256(backfill name): always a valid label value', () => {
    expect(backfillLabelValue('model-eval-gemma4-5930k')).toBe(sha256('model-eval-gemma4-5930k').slice(0, 16))
    const long = 'z'.repeat(253)
    expect(backfillLabelValue(long)).toMatch(/^[0-9a-f]{16}$/)
    expect(backfillLabelValue('a')).not.toBe(backfillLabelValue('b'))
  })
})

describe('KV keys', () => {
  it('are <namespace>.<name>', () => {
    expect(modelKey('flexinfer-system', 'gemma4-26b')).toBe('flexinfer-system.gemma4-26b')
    expect(backfillKey('flexinfer-system', 'model-eval')).toBe('flexinfer-system.model-eval')
  })
})
