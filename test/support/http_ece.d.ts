/** The part of http_ece 1.2.0 (untyped) the test push service uses to decrypt what web-push encrypted. */
declare module "http_ece" {
  import type { ECDH } from "node:crypto"

  interface DecryptParams {
    /** `aes128gcm` reads the sender's public key and salt from the body's header. */
    readonly version: "aes128gcm"
    /** The receiver's (the browser's) key pair. */
    readonly privateKey: ECDH
    /** The subscription's 16-byte auth secret (bytes, or base64url). */
    readonly authSecret: Buffer | string
  }

  /** The plaintext; throws when the body does not decrypt with these keys. */
  export function decrypt(buffer: Buffer, params: DecryptParams): Buffer

  const ece: { readonly decrypt: typeof decrypt }
  export default ece
}
