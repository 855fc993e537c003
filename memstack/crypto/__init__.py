"""Keys and the encrypted envelope format used by ``EncryptedSession``."""

from memstack.crypto.keys import (
    KeyProvider,
    Keyring,
    generate_key,
    key_from_password,
    key_id,
    keyring_from_env,
    parse_key,
)

__all__ = [
    "KeyProvider",
    "Keyring",
    "generate_key",
    "key_from_password",
    "key_id",
    "keyring_from_env",
    "parse_key",
]
