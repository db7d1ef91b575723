"""A stand-in for pulumi-random 4.21.4 (requirements.txt), whose provider module the Go module proxy
does not serve (docs/toolchain.md, "Stand-ins for pulumi-random and pulumi-command"). It implements
the two resource types the program uses, with terraform-provider-random's semantics (pulumi-random
bridges that provider), read in its source:

  internal/provider/resource_password.go, passwordSchemaV3: `length` required, at least 1 and at
    least min_upper + min_lower + min_numeric + min_special; special, upper, lower default true,
    min_* default 0, `number` (deprecated) and `numeric` kept equal (planmodifiers/bool:
    NumberNumericAttributePlanModifier, both true when neither is set, an error when they differ);
    every input RequiresReplace; `result` and `bcrypt_hash` computed and sensitive; id "none".
  internal/random/string.go, CreateString: min_* characters drawn from each set first (whatever
    the booleans say), the rest from the union of the enabled sets, then shuffled; the special
    set is `!@#$%&*()-_=+[]{}<>:?` unless override_special is non-empty.
  internal/provider/resource_bytes.go: `length` required, at least 1, RequiresReplace; `base64`
    and `hex` of `length` random bytes, sensitive; keepers replace; id "none".

Where it differs: bcrypt_hash is made by the C library's bcrypt (`$2b$`, cost 10) where upstream's Go
bcrypt writes `$2a$` (cost 10, the same hash function); a negative min_* and a password with no
character set to draw from are refused at check (upstream fails at create); import is not done.
"""

from __future__ import annotations

import base64
import secrets
import string
import sys
import warnings
from typing import Any

from e2e.providers.plugin import UNKNOWN, Checked, Failure, ResourceKind, StandInProvider, reveal, secret, serve

with warnings.catch_warnings():  # deprecated in 3.11, the only bcrypt the venv has (no `bcrypt` package)
    warnings.simplefilter("ignore", DeprecationWarning)
    import crypt

SDK_VERSION = "4.21.4"  # the pulumi_random Python SDK in requirements.txt, which this stands in for
NOTE = (f"pulumi-resource-random here is a STAND-IN for pulumi-random {SDK_VERSION} (e2e/providers/random_provider.py): "
        "the Go module proxy serves no version of the provider (docs/toolchain.md)")
PASSWORD = "random:index/randomPassword:RandomPassword"
BYTES = "random:index/randomBytes:RandomBytes"
STATIC_ID = "none"  # upstream's id for both
BCRYPT_COST_ROUNDS = 2 ** 10  # Go bcrypt.DefaultCost 10

UPPER, LOWER, NUMERIC = string.ascii_uppercase, string.ascii_lowercase, string.digits
SPECIAL = "!@#$%&*()-_=+[]{}<>:?"
FLAGS = ("special", "upper", "lower", "number", "numeric")
MINIMA = ("minUpper", "minLower", "minNumeric", "minSpecial")


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer()


def _shown(value: Any) -> str:
    """A value as the user wrote it: numbers arrive as floats on the wire."""
    return str(int(value)) if _is_int(value) else repr(value)


def _check_keepers(news: dict[str, Any], failures: list[Failure]) -> None:
    keepers = reveal(news.get("keepers"))
    if keepers is None or keepers == UNKNOWN:
        return
    if not isinstance(keepers, dict):
        failures.append(Failure("keepers", "must be a map of strings"))
        return
    for key, value in keepers.items():
        if value is not None and value != UNKNOWN and not isinstance(value, str):
            failures.append(Failure(f"keepers.{key}", f"must be a string, not {type(value).__name__}"))


def _check_length(news: dict[str, Any], failures: list[Failure]) -> int | None:
    """The length if known and valid, else None (a failure is added where it is wrong)."""
    length = reveal(news.get("length"))
    if length is None:
        failures.append(Failure("length", "is required: the number of characters (bytes) to generate, at least 1"))
    elif length == UNKNOWN:
        return None
    elif not _is_int(length) or length < 1:
        failures.append(Failure("length", f"must be a whole number, at least 1 (got {_shown(length)})"))
    else:
        return int(length)
    return None


def _unknown_keys(news: dict[str, Any], allowed: tuple[str, ...], failures: list[Failure]) -> None:
    for key in sorted(set(news) - set(allowed)):
        failures.append(Failure(key, f"is not an input of this resource; its inputs are {', '.join(allowed)}"))


class RandomPassword(ResourceKind):
    token = PASSWORD
    INPUTS = ("keepers", "length", *FLAGS, *MINIMA, "overrideSpecial")
    SECRET_OUTPUTS = ("result", "bcryptHash")

    def check(self, news: dict[str, Any]) -> Checked:
        failures: list[Failure] = []
        _unknown_keys(news, self.INPUTS, failures)
        _check_keepers(news, failures)
        length = _check_length(news, failures)
        inputs = dict(news)
        for flag in ("special", "upper", "lower"):
            inputs.setdefault(flag, True)
        number, numeric = reveal(news.get("number")), reveal(news.get("numeric"))
        if number is not None and numeric is not None and number != numeric and UNKNOWN not in (number, numeric):
            failures.append(Failure("numeric", "number and numeric are both set, to different values "
                                               "(number is deprecated: set numeric only)"))
        # Each takes the other's value where it is not set; both true where neither is.
        either = news["numeric"] if numeric is not None else news["number"] if number is not None else True
        inputs["number"] = news["number"] if number is not None else either
        inputs["numeric"] = news["numeric"] if numeric is not None else either
        for flag in FLAGS:
            value = reveal(inputs[flag])
            if value != UNKNOWN and not isinstance(value, bool):
                failures.append(Failure(flag, f"must be true or false (got {value!r})"))
        minima: dict[str, int] = {}
        for key in MINIMA:
            inputs.setdefault(key, 0)
            value = reveal(inputs[key])
            if value == UNKNOWN:
                continue
            if not _is_int(value) or value < 0:
                failures.append(Failure(key, f"must be a whole number, 0 or more (got {_shown(value)})"))
            else:
                minima[key] = int(value)
        special_chars = reveal(news.get("overrideSpecial"))
        if special_chars is not None and special_chars != UNKNOWN and not isinstance(special_chars, str):
            failures.append(Failure("overrideSpecial", f"must be a string (got {special_chars!r})"))
        if length is not None and len(minima) == len(MINIMA) and sum(minima.values()) > length:
            failures.append(Failure("length", f"must be at least minUpper + minLower + minNumeric + minSpecial "
                                              f"= {sum(minima.values())} (got {length})"))
        if length is not None and len(minima) == len(MINIMA) and sum(minima.values()) < length:
            enabled = [reveal(inputs[f]) for f in ("upper", "lower", "numeric", "special")]
            if not any(enabled) and UNKNOWN not in enabled:
                failures.append(Failure("length", "no character set to draw from: upper, lower, numeric and special "
                                                  "are all false and the min* add up to less than length"))
        return Checked(inputs, failures)

    def replaces_on_change(self, key: str) -> bool:
        return True  # every input RequiresReplace upstream

    def same(self, key: str, old: Any, new: Any) -> bool:
        if key == "overrideSpecial":  # RequiresReplaceUnlessEmptyStringToNull
            return (old or "") == (new or "")
        if key == "keepers":  # RequiresReplaceIfValuesNotNull: null values are as if absent
            return ({k: v for k, v in (old or {}).items() if v is not None}
                    == {k: v for k, v in (new or {}).items() if v is not None})
        return bool(old == new)

    def create(self, inputs: dict[str, Any], preview: bool) -> tuple[str, dict[str, Any]]:
        if preview:
            return "", {**inputs, "result": secret(UNKNOWN), "bcryptHash": secret(UNKNOWN)}
        plain = reveal(inputs)
        password = generate_password(plain)
        return STATIC_ID, {**inputs, "result": secret(password), "bcryptHash": secret(bcrypt_hash(password))}

    def update(self, olds: dict[str, Any], news: dict[str, Any], preview: bool) -> dict[str, Any]:
        # Not reached (every change replaces); upstream's Update copies the plan, whose computed
        # values are the state's (UseStateForUnknown).
        return {**news, **{k: olds[k] for k in self.SECRET_OUTPUTS if k in olds}}

    def delete(self, olds: dict[str, Any]) -> None:
        return None  # nothing lives outside the state


class RandomBytes(ResourceKind):
    token = BYTES
    INPUTS = ("keepers", "length")
    SECRET_OUTPUTS = ("base64", "hex")

    def check(self, news: dict[str, Any]) -> Checked:
        failures: list[Failure] = []
        _unknown_keys(news, self.INPUTS, failures)
        _check_keepers(news, failures)
        _check_length(news, failures)
        return Checked(dict(news), failures)

    def replaces_on_change(self, key: str) -> bool:
        return True

    def same(self, key: str, old: Any, new: Any) -> bool:
        return RandomPassword().same(key, old, new)

    def create(self, inputs: dict[str, Any], preview: bool) -> tuple[str, dict[str, Any]]:
        if preview:
            return "", {**inputs, "base64": secret(UNKNOWN), "hex": secret(UNKNOWN)}
        raw = secrets.token_bytes(int(reveal(inputs["length"])))
        return STATIC_ID, {**inputs, "base64": secret(base64.b64encode(raw).decode()), "hex": secret(raw.hex())}

    def update(self, olds: dict[str, Any], news: dict[str, Any], preview: bool) -> dict[str, Any]:
        return {**news, **{k: olds[k] for k in self.SECRET_OUTPUTS if k in olds}}

    def delete(self, olds: dict[str, Any]) -> None:
        return None


def generate_password(params: dict[str, Any]) -> str:
    """CreateString: the minimum of each set first, the rest from the enabled sets, shuffled."""
    special = params.get("overrideSpecial") or SPECIAL
    sets = [(UPPER, "upper", "minUpper"), (LOWER, "lower", "minLower"),
            (NUMERIC, "numeric", "minNumeric"), (special, "special", "minSpecial")]
    chosen = [secrets.choice(chars) for chars, _, minimum in sets for _ in range(int(params[minimum]))]
    pool = "".join(chars for chars, flag, _ in sets if params[flag])
    chosen += [secrets.choice(pool) for _ in range(int(params["length"]) - len(chosen))]
    secrets.SystemRandom().shuffle(chosen)
    return "".join(chosen)


def bcrypt_hash(password: str) -> str:
    return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=BCRYPT_COST_ROUNDS))


def make_provider(engine: str) -> StandInProvider:
    return StandInProvider("random", SDK_VERSION, NOTE, [RandomPassword(), RandomBytes()], engine)


def main(argv: list[str]) -> None:
    serve(make_provider, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
