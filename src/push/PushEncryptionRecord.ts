/**
 * The encrypted body of one push message: RFC 8291's aes128gcm (over RFC 8188), built directly with
 * `node:crypto`. web-push does the same through `http_ece`, in pure JavaScript HMACs and with the
 * browser's key decoded again for every message, at about twice the CPU; its output and RFC 8291's
 * worked example are the oracles this is tested against.
 *
 * What it keeps true:
 * - Every message has a fresh ephemeral P-256 key pair and a fresh random 16-byte salt; only a
 *   test passes its own (`Fixed`), to reproduce RFC 8291's example byte for byte.
 * - The body is one record: the 86-byte header (salt, record size 4096, the 65-byte ephemeral
 *   public key), then the plaintext, the 0x02 delimiter of a last record and no padding,
 *   encrypted with AES-128-GCM, then its 16-byte tag.
 * - A browser key that is not an uncompressed P-256 point, or an auth secret that is not 16
 *   bytes, throws (`PushKeyRefused`): registrations are checked when they are made
 *   (`PushRegistration.check`), so this is a defect, never a message sent with a bad key.
 * - The browser keys decoded for ECDH are kept per thread (at most `maxCachedKeys`, the least
 *   recently used dropped first): the same browser gets message after message.
 */
import {
  createCipheriv,
  createHmac,
  createPrivateKey,
  createPublicKey,
  createSecretKey,
  diffieHellman,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
} from "node:crypto"
import { LruCache } from "../platform/LruCache.ts"

/** The record size in the header: one record holds any message a push service takes (4,096 bytes). */
export const recordSize = 4096

/** Salt (16), record size (4), key id length (1), the ephemeral public key (65). */
export const headerBytes = 86

/** The delimiter, tag and header one message adds to its plaintext. */
export const overheadBytes = headerBytes + 1 + 16

const maxCachedKeys = 10_000

export class PushKeyRefused extends Error {
  override readonly name = "PushKeyRefused"
}

/** The ephemeral key pair and salt of one message, chosen by the caller: tests only (see the module header). */
export interface Fixed {
  /** The 32-byte private scalar of the ephemeral key. */
  readonly ephemeralPrivateKey: Uint8Array
  readonly salt: Uint8Array
}

// DER of SubjectPublicKeyInfo for a P-256 key, up to the BIT STRING that holds the 65-byte point:
// the key form every Node version since 22 imports (raw points only from 24).
const spkiPrefix = Buffer.from("3059301306072a8648ce3d020106082a8648ce3d030107034200", "hex")

const browserKeys = new LruCache<string, KeyObject>(maxCachedKeys)

const browserKey = (point: Buffer): KeyObject => {
  const id = point.toString("base64url")
  const cached = browserKeys.get(id)
  if (cached !== undefined) return cached
  if (point.length !== 65 || point[0] !== 0x04) {
    throw new PushKeyRefused(`p256dh is ${point.length} bytes; an uncompressed P-256 point is 65, starting with 0x04`)
  }
  let key: KeyObject
  try {
    key = createPublicKey({ key: Buffer.concat([spkiPrefix, point]), format: "der", type: "spki" })
  } catch {
    throw new PushKeyRefused("p256dh is not a point of the P-256 curve")
  }
  return browserKeys.set(id, key)
}

const pointOf = (jwk: { readonly x?: string | undefined; readonly y?: string | undefined }) =>
  Buffer.concat([Buffer.from([0x04]), Buffer.from(jwk.x!, "base64url"), Buffer.from(jwk.y!, "base64url")])

const fresh = (): { readonly privateKey: KeyObject; readonly point: Buffer } => {
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" })
  return { privateKey, point: pointOf(publicKey.export({ format: "jwk" })) }
}

const fixedKey = (d: Uint8Array): { readonly privateKey: KeyObject; readonly point: Buffer } => {
  // A JWK private key needs its public half; OpenSSL derives it from the scalar through PKCS#8.
  const pkcs8 = Buffer.concat([
    Buffer.from("3041020100301306072a8648ce3d020106082a8648ce3d030107042730250201010420", "hex"),
    d,
  ])
  const privateKey = createPrivateKey({ key: pkcs8, format: "der", type: "pkcs8" })
  return { privateKey, point: pointOf(createPublicKey(privateKey).export({ format: "jwk" })) }
}

const keyInfoLabel = Buffer.from("WebPush: info\0")
const firstBlock = Buffer.from([0x01])
const cekInfo = Buffer.from("Content-Encoding: aes128gcm\0")
const nonceInfo = Buffer.from("Content-Encoding: nonce\0")
const lastRecord = Buffer.from([0x02])

/**
 * HMAC-SHA-256 of `data` then `more` under `key`, keyed with a `KeyObject` (keyed with bytes, Node
 * copies and checks the key on every call). The five HMACs of a message cost 19 µs where the three
 * `hkdfSync` calls they replace cost 33 (Node 24, one host).
 */
const hmac = (key: Uint8Array, data: Uint8Array, more?: Uint8Array): Buffer => {
  const mac = createHmac("sha256", createSecretKey(key)).update(data)
  return (more === undefined ? mac : mac.update(more)).digest()
}

/**
 * RFC 5869's expand step for at most one hash of output (the first block, `info || 0x01`). The
 * three derivations share extracts: RFC 8188's content key and nonce come from one `prk`.
 */
const expand = (prk: Uint8Array, info: Uint8Array, length: number): Buffer =>
  hmac(prk, info, firstBlock).subarray(0, length)

/**
 * The aes128gcm body of `plaintext` for the browser whose keys are `p256dh` (its public key) and
 * `auth` (its auth secret). Throws `PushKeyRefused` for keys `PushRegistration.check` would refuse.
 */
export const encrypt = (plaintext: Uint8Array, p256dh: Uint8Array, auth: Uint8Array, fixed?: Fixed): Buffer => {
  const receiverPoint = Buffer.isBuffer(p256dh) ? p256dh : Buffer.from(p256dh)
  const receiver = browserKey(receiverPoint)
  if (auth.length !== 16) throw new PushKeyRefused(`auth is ${auth.length} bytes; RFC 8291 says 16`)
  const sender = fixed === undefined ? fresh() : fixedKey(fixed.ephemeralPrivateKey)
  const salt = fixed === undefined ? randomBytes(16) : Buffer.from(fixed.salt)
  const shared = diffieHellman({ privateKey: sender.privateKey, publicKey: receiver })
  // RFC 8291 section 3.4: the auth secret and both public keys bind the shared secret to this
  // browser; then RFC 8188 derives the content key and nonce from it and the salt.
  const keyInfo = Buffer.concat([keyInfoLabel, receiverPoint, sender.point])
  const ikm = expand(hmac(auth, shared), keyInfo, 32)
  const prk = hmac(salt, ikm)
  const cek = expand(prk, cekInfo, 16)
  const nonce = expand(prk, nonceInfo, 12)
  const header = Buffer.allocUnsafe(headerBytes)
  salt.copy(header, 0)
  header.writeUInt32BE(recordSize, 16)
  header[20] = 65
  sender.point.copy(header, 21)
  const cipher = createCipheriv("aes-128-gcm", cek, nonce)
  const body = cipher.update(plaintext)
  const end = cipher.update(lastRecord)
  cipher.final()
  return Buffer.concat([header, body, end, cipher.getAuthTag()])
}
