/**
 * A self-signed certificate for `localhost` and 127.0.0.1, valid until 2126, for tests that need a
 * TLS server a client must refuse. Generated once with
 * `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 36500
 *  -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1`; test use only.
 */
export const key = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg0g/5MhsRl0idzqlr
TkWrlbfFjTQRZr5GzV1lmwlFADehRANCAARZzqIjO4eTA3XVT1nfj9Mwq0rV+E5B
Ta2qfU3SwBdix+YropJndogan2CRjy8l9Yu2OlgkkkwLp6U0bPW0i9pm
-----END PRIVATE KEY-----
`

export const cert = `-----BEGIN CERTIFICATE-----
MIIBmjCCAUGgAwIBAgIUTtfqRWzZ7rcyxMBj1MpO+EZKphgwCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTEzMDA1MzYwN1oYDzIxMjYxMTA2
MDUzNjA3WjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAARZzqIjO4eTA3XVT1nfj9Mwq0rV+E5BTa2qfU3SwBdix+YropJndoga
n2CRjy8l9Yu2OlgkkkwLp6U0bPW0i9pmo28wbTAdBgNVHQ4EFgQUiUhBMAkXNdYL
uY3A0jV5U8ElEUEwHwYDVR0jBBgwFoAUiUhBMAkXNdYLuY3A0jV5U8ElEUEwDwYD
VR0TAQH/BAUwAwEB/zAaBgNVHREEEzARgglsb2NhbGhvc3SHBH8AAAEwCgYIKoZI
zj0EAwIDRwAwRAIgQ6hCn4S/qTDxzMa2GsGjWBYJhlaBqIER850VfHh9B78CIB9m
xEBsEQfMJFMrYafbOZT8tD5i5FZZIkiZO+CMoa0n
-----END CERTIFICATE-----
`
