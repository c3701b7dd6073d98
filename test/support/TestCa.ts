/**
 * Certificate authorities made for one test with `openssl` (node:crypto can make keys but not sign
 * certificates): a CA, and a server certificate it signs for `localhost` and 127.0.0.1. Files go
 * into the given folder; the server's key is made readable by the OS user `owner` only, as
 * PostgreSQL demands of `ssl_key_file`. Test use only.
 */
import { execFileSync } from "node:child_process"
import { chmodSync, chownSync } from "node:fs"
import { join } from "node:path"

const openssl = (...args: ReadonlyArray<string>) =>
  execFileSync("openssl", args, { stdio: ["ignore", "ignore", "pipe"] })

/** A new CA in `dir`: its certificate file (what a client's `sslrootcert` names) and key file. */
export const makeCa = (dir: string, name: string) => {
  const cert = join(dir, `${name}.crt`)
  const key = join(dir, `${name}.key`)
  openssl(
    "req",
    "-x509",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
    "-days",
    "2",
    "-subj",
    `/CN=${name}`,
    "-keyout",
    key,
    "-out",
    cert,
  )
  return { cert, key }
}

/** A server certificate for localhost and 127.0.0.1 signed by `ca`; its key owned by `owner`. */
export const makeServerCert = (
  dir: string,
  ca: { readonly cert: string; readonly key: string },
  owner: { readonly uid: number; readonly gid: number } | undefined,
) => {
  const cert = join(dir, "server.crt")
  const key = join(dir, "server.key")
  const request = join(dir, "server.csr")
  const extensions = join(dir, "server.ext")
  openssl(
    "req",
    "-new",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
    "-subj",
    "/CN=localhost",
    "-keyout",
    key,
    "-out",
    request,
  )
  execFileSync("sh", ["-c", `printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > "$1"`, "sh", extensions])
  openssl(
    "x509",
    "-req",
    "-in",
    request,
    "-CA",
    ca.cert,
    "-CAkey",
    ca.key,
    "-CAcreateserial",
    "-days",
    "2",
    "-extfile",
    extensions,
    "-out",
    cert,
  )
  chmodSync(key, 0o600)
  if (owner !== undefined) {
    chownSync(key, owner.uid, owner.gid)
    chownSync(cert, owner.uid, owner.gid)
  }
  return { cert, key }
}
