// The test environment's llama-server command line (test/env/engine.ts engineArgs): the prompt chunk (-b/-ub)
// defaults when an option is named but undefined, as a caller passing its own optional setting on does.
import { describe, expect, it } from 'vitest'
import { type EngineServerInfo, engineArgs } from '../env/engine.js'

const server: EngineServerInfo = {
  api: 'completions',
  name: 'llama-server-completions',
  model: 'gemma-3-270m',
  modelPath: '/models/gemma.gguf',
  url: 'http://127.0.0.1:1',
  port: 1,
  logPath: '/tmp/x.log',
}
const flag = (args: string[], name: string) => args[args.indexOf(name) + 1]

describe('engineArgs', () => {
  it('takes 256-token prompt chunks unless told otherwise, an undefined option included', () => {
    for (const args of [engineArgs(server), engineArgs(server, { batchSize: undefined, threads: undefined })]) {
      expect([flag(args, '--batch-size'), flag(args, '--ubatch-size'), flag(args, '--threads')]).toEqual([
        '256',
        '256',
        '1',
      ])
    }
    const args = engineArgs(server, { batchSize: 32 })
    expect([flag(args, '--batch-size'), flag(args, '--ubatch-size')]).toEqual(['32', '32'])
  })
})
