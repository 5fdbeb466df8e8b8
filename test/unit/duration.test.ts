// Go / Kubernetes duration syntax, as metav1.Duration (time.ParseDuration) accepts it.
import { describe, expect, it } from 'vitest'
import { DurationError, formatDuration, parseDuration } from '../../pkg/core/duration.js'

const S = 1000
const M = 60 * S
const H = 60 * M

describe('parseDuration', () => {
  it.each([
    ['90s', 90 * S],
    ['15m', 15 * M],
    ['1h30m', H + 30 * M],
    ['1.5h', H + 30 * M],
    ['300ms', 300],
    ['0', 0],
    ['0s', 0],
    ['-0', 0],
    ['+0', 0],
    ['-5m', -5 * M],
    ['+5m', 5 * M],
    ['24h', 24 * H],
    ['1h0m0s', H],
    ['2h45m30.5s', 2 * H + 45 * M + 30.5 * S],
    ['.5s', 500],
    ['1.s', S],
    ['1us', 0.001],
    ['1µs', 0.001],
    ['1μs', 0.001],
    ['1000000ns', 1],
    ['30m15m', 45 * M],
  ])('%s → %d ms', (text, ms) => {
    expect(parseDuration(text)).toBeCloseTo(ms, 9)
  })

  it.each([
    [''],
    ['5'],
    ['m'],
    ['1x'],
    ['1h 30m'],
    ['-'],
    ['+'],
    ['.s'],
    ['1h30'],
    ['00'],
    ['h1'],
    ['1d'],
    ['1H'],
    ['5 m'],
    ['1e3s'],
  ])('%j is an error', (text) => {
    expect(() => parseDuration(text)).toThrow(DurationError)
  })

  it('tells the user what syntax to use', () => {
    expect(() => parseDuration('1x')).toThrow(/90s, 15m or 1h30m/)
  })
})

describe('formatDuration', () => {
  it.each([
    [0, '0s'],
    [90 * S, '1m30s'],
    [H + 30 * M, '1h30m0s'],
    [24 * H, '24h0m0s'],
    [1500, '1.5s'],
    [-5 * M, '-5m0s'],
  ])('%d ms → %s', (ms, text) => {
    expect(formatDuration(ms)).toBe(text)
  })

  it('round-trips through parseDuration', () => {
    for (const ms of [S, 59 * S, M, 61 * M, 25 * H + 1500]) expect(parseDuration(formatDuration(ms))).toBe(ms)
  })
})
