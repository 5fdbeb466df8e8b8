// natsServerOptions: credential files (a mounted Secret) win over the URL, the user names the inbox prefix, and a
// placeholder seed is refused by file name before anything connects.
import { mkdtemp, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createUser } from '@nats-io/nkeys'
import { expect, it } from 'vitest'
import { natsServerOptions } from '../../pkg/jetstream/connect.js'

it('NATS_NKEY_SEED_FILE, NATS_CREDS_FILE or ?nkey_seed_file= give an authenticator and no password', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'nats-cred-unit-'))
  const seed = join(dir, 'seed')
  await writeFile(seed, `${new TextDecoder().decode(createUser().getSeed())}\n`)
  const fromEnv = natsServerOptions('nats://admit@nats:4222,nats://nats-2:4222', { NATS_NKEY_SEED_FILE: seed })
  expect(fromEnv.servers).toEqual(['nats://nats:4222', 'nats://nats-2:4222'])
  expect(fromEnv.inboxPrefix).toBe('_INBOX_admit')
  expect(typeof fromEnv.authenticator).toBe('function')
  expect(fromEnv).not.toHaveProperty('user')
  expect(fromEnv).not.toHaveProperty('pass')
  const fromUrl = natsServerOptions(`nats://admit@nats:4222?nkey_seed_file=${encodeURIComponent(seed)}`, {})
  expect(fromUrl.servers).toEqual(['nats://nats:4222'])
  expect(typeof fromUrl.authenticator).toBe('function')
  const creds = natsServerOptions('nats://cancel@nats:4222', { NATS_CREDS_FILE: join(dir, 'x.creds') })
  expect(typeof creds.authenticator).toBe('function')
  // A password in the URL (a local development server) still works when no file is configured.
  expect(natsServerOptions('nats://demand:pw@nats:4222', {})).toMatchObject({ user: 'demand', pass: 'pw' })
})

it('a placeholder or missing seed file is refused with its name', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'nats-cred-unit-'))
  const placeholder = join(dir, 'seed')
  await writeFile(placeholder, 'REPLACE_WITH_THE_ADMIT_NKEY_SEED')
  expect(() => natsServerOptions('nats://admit@nats:4222', { NATS_NKEY_SEED_FILE: placeholder })).toThrow(
    /NKey seed file .*seed holds no user seed/,
  )
  expect(() => natsServerOptions('nats://admit@nats:4222', { NATS_NKEY_SEED_FILE: join(dir, 'missing') })).toThrow(
    /ENOENT/,
  )
})
