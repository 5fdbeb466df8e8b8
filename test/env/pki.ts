// A throwaway PKI for one environment, made with the openssl CLI: a CA, the apiserver's serving certificate,
// client certificates (admin in system:masters, the controller manager's own identity) and the service-account
// signing key pair. ECDSA P-256 keys: generated in milliseconds, accepted by every component.
import { randomBytes } from 'node:crypto'
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { runOk } from './exec.js'

const OPENSSL = process.env.OPENSSL ?? 'openssl'

export interface Pki {
  dir: string
  caCert: string
  caKey: string
  apiserverCert: string
  apiserverKey: string
  adminCert: string
  adminKey: string
  controllerManagerCert: string
  controllerManagerKey: string
  serviceAccountKey: string
  serviceAccountPub: string
}

/** SANs on the apiserver's serving certificate: loopback plus the in-cluster names of the kubernetes Service. */
export const APISERVER_SANS = [
  'IP:127.0.0.1',
  'DNS:localhost',
  'DNS:kubernetes',
  'DNS:kubernetes.default',
  'DNS:kubernetes.default.svc',
  'DNS:kubernetes.default.svc.cluster.local',
  'IP:10.0.0.1',
]

const REQ_CONFIG = '[req]\ndistinguished_name = dn\nprompt = no\n[dn]\n'

async function genKey(path: string): Promise<void> {
  await runOk(OPENSSL, ['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', path])
}

/** Issues a leaf certificate `<dir>/<name>.crt` (and its key) signed by the CA. */
export async function issue(
  dir: string,
  name: string,
  subject: string,
  extensions: string,
  ca: { cert: string; key: string },
): Promise<{ cert: string; key: string }> {
  const key = join(dir, `${name}.key`)
  const csr = join(dir, `${name}.csr`)
  const cert = join(dir, `${name}.crt`)
  const ext = join(dir, `${name}.ext`)
  await Promise.all([genKey(key), writeFile(ext, extensions)])
  await runOk(OPENSSL, ['req', '-new', '-key', key, '-subj', subject, '-config', join(dir, 'req.cnf'), '-out', csr])
  await runOk(OPENSSL, [
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    ca.cert,
    '-CAkey',
    ca.key,
    '-set_serial',
    `0x${randomBytes(12).toString('hex')}`,
    '-days',
    '30',
    '-sha256',
    '-extfile',
    ext,
    '-out',
    cert,
  ])
  return { cert, key }
}

/** The x509 extensions of a leaf certificate for `usage`; `extra` adds lines (e.g. a subjectAltName). */
export function leaf(usage: 'serverAuth' | 'clientAuth' | 'serverAuth,clientAuth', extra = ''): string {
  return `basicConstraints = critical,CA:FALSE\nkeyUsage = critical,digitalSignature,keyEncipherment\nextendedKeyUsage = ${usage}\nauthorityKeyIdentifier = keyid\n${extra}`
}

export async function createPki(dir: string): Promise<Pki> {
  await mkdir(dir, { recursive: true, mode: 0o700 })
  await writeFile(join(dir, 'req.cnf'), REQ_CONFIG)
  const caKey = join(dir, 'ca.key')
  const caCert = join(dir, 'ca.crt')
  const caConfig = join(dir, 'ca.cnf')
  const saKey = join(dir, 'sa.key')
  const saPub = join(dir, 'sa.pub')
  await writeFile(
    caConfig,
    `${REQ_CONFIG}[v3]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign,digitalSignature\nsubjectKeyIdentifier = hash\n`,
  )
  const serviceAccountKeys = genKey(saKey).then(() => runOk(OPENSSL, ['pkey', '-in', saKey, '-pubout', '-out', saPub]))
  await genKey(caKey)
  await runOk(OPENSSL, [
    'req',
    '-x509',
    '-new',
    '-key',
    caKey,
    '-subj',
    '/CN=modelbackfill-test-ca',
    '-days',
    '30',
    '-sha256',
    '-config',
    caConfig,
    '-extensions',
    'v3',
    '-out',
    caCert,
  ])
  const ca = { cert: caCert, key: caKey }
  const [apiserver, admin, kcm] = await Promise.all([
    issue(
      dir,
      'apiserver',
      '/CN=kube-apiserver',
      leaf('serverAuth', `subjectAltName = ${APISERVER_SANS.join(',')}\n`),
      ca,
    ),
    issue(dir, 'admin', '/O=system:masters/CN=admin', leaf('clientAuth'), ca),
    issue(dir, 'kube-controller-manager', '/CN=system:kube-controller-manager', leaf('clientAuth'), ca),
    serviceAccountKeys,
  ])
  return {
    dir,
    caCert,
    caKey,
    apiserverCert: apiserver.cert,
    apiserverKey: apiserver.key,
    adminCert: admin.cert,
    adminKey: admin.key,
    controllerManagerCert: kcm.cert,
    controllerManagerKey: kcm.key,
    serviceAccountKey: saKey,
    serviceAccountPub: saPub,
  }
}

/** A kubeconfig (YAML is a JSON superset, so JSON it is) with the CA and client credentials embedded. */
export async function writeKubeconfig(
  path: string,
  opts: { server: string; caCert: string; clientCert: string; clientKey: string; user: string },
): Promise<void> {
  const b64 = async (file: string) => (await readFile(file)).toString('base64')
  const config = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: 'modelbackfill-test',
        cluster: { server: opts.server, 'certificate-authority-data': await b64(opts.caCert) },
      },
    ],
    users: [
      {
        name: opts.user,
        user: {
          'client-certificate-data': await b64(opts.clientCert),
          'client-key-data': await b64(opts.clientKey),
        },
      },
    ],
    contexts: [{ name: opts.user, context: { cluster: 'modelbackfill-test', user: opts.user } }],
    'current-context': opts.user,
  }
  await writeFile(path, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o600 })
}
