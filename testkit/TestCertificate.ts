/**
 * A self-signed certificate for `localhost` and 127.0.0.1, valid until 2126, for the push service
 * fake when it speaks TLS (HTTP/2 and HTTP/1.1, chosen by ALPN): a client trusts it by passing
 * `cert` as its CA. Generated once with
 * `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 36500
 *  -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1`; test use only.
 */
export const key = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgFYE3LwFQp2WgyBHH
R3ig7jXG0zHrvizyQ6Se/2fWNsqhRANCAASq0T+5cPCiDhuSne5Ib39yAfRXP2Dm
02nXjzQCDkMHfOwirunKhFpNj5G7kI9FMsr9tKwHsTf0IW/JyddBfnbj
-----END PRIVATE KEY-----
`

export const cert = `-----BEGIN CERTIFICATE-----
MIIBmzCCAUGgAwIBAgIUWk99lX8JH6SK8FF4rHaSZUS1Ec0wCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTIwNTAzMjE0N1oYDzIxMjYxMTEx
MDMyMTQ3WjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAASq0T+5cPCiDhuSne5Ib39yAfRXP2Dm02nXjzQCDkMHfOwirunKhFpN
j5G7kI9FMsr9tKwHsTf0IW/JyddBfnbjo28wbTAdBgNVHQ4EFgQUiFNPsn5FqYL6
6FmMjzmS3Zs+0j0wHwYDVR0jBBgwFoAUiFNPsn5FqYL66FmMjzmS3Zs+0j0wDwYD
VR0TAQH/BAUwAwEB/zAaBgNVHREEEzARgglsb2NhbGhvc3SHBH8AAAEwCgYIKoZI
zj0EAwIDSAAwRQIgGmKle60szme7e8XyMGoGmvQgTxhZX5E+FSUWpvpv5EcCIQDe
5uLzhBggL6DQqNkDs0sKdmzHZWxZ2c+z4I9Q9lV5dw==
-----END CERTIFICATE-----
`
