"""Verifies an agent card's signature independently of roostd, with jwcrypto.

Fetches the card, then the JWK Set its signature names (the protected
header's `jku`), canonicalizes the card without `signatures` (RFC 8785:
members sorted, no whitespace; the card's keys are ASCII, where code-point
order is RFC 8785's UTF-16 order) and verifies the JWS (ES256) over it.
Then changes one field and checks that the signature no longer verifies.
Prints `verified <kid>` and `forgery refused`; exits 1 otherwise.

    python verify_card.py --card http://127.0.0.1:PORT/a2a/NAME/.well-known/agent-card.json
"""

import argparse
import base64
import json
import sys
import urllib.request

from jwcrypto import jwk, jws
from jwcrypto.common import JWException


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b'=').decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + '=' * (-len(text) % 4))


def canonical(value) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(',', ':'), ensure_ascii=False
    ).encode()


def fetch(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def verifies(card: dict, signature: dict, keys: jwk.JWKSet, kid: str) -> bool:
    unsigned = {k: v for k, v in card.items() if k != 'signatures'}
    compact = '.'.join(
        [signature['protected'], b64url(canonical(unsigned)), signature['signature']]
    )
    token = jws.JWS()
    token.deserialize(compact)
    try:
        token.verify(keys.get_key(kid), alg='ES256')
        return True
    except JWException:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--card', required=True, help='the agent card URL')
    args = parser.parse_args()
    card = fetch(args.card)
    signatures = card.get('signatures') or []
    if not signatures:
        print('the card has no signatures')
        return 1
    signature = signatures[0]
    header = json.loads(unb64url(signature['protected']))
    if header.get('alg') != 'ES256' or not header.get('kid') or not header.get('jku'):
        print(f'unexpected protected header: {header}')
        return 1
    keys = jwk.JWKSet.from_json(json.dumps(fetch(header['jku'])))
    if not verifies(card, signature, keys, header['kid']):
        print('the signature does not verify')
        return 1
    print(f"verified {header['kid']}")
    forged = dict(card, name=card['name'] + '-forged')
    if verifies(forged, signature, keys, header['kid']):
        print('a changed card still verifies')
        return 1
    print('forgery refused')
    return 0


if __name__ == '__main__':
    sys.exit(main())
