// The kustomize base carries a copy of the ModelBackfill CRD (kustomize cannot load files outside its folder):
// it must be the generated one, byte for byte.
import { readFile } from 'node:fs/promises'
import { expect, it } from 'vitest'

it('base/crds/modelbackfill.yaml is identical to crds/modelbackfill.yaml (cp crds/modelbackfill.yaml base/crds/)', async () => {
  const [generated, copy] = await Promise.all([
    readFile(new URL('../../crds/modelbackfill.yaml', import.meta.url), 'utf8'),
    readFile(new URL('../../base/crds/modelbackfill.yaml', import.meta.url), 'utf8'),
  ])
  expect(copy).toBe(generated)
})
