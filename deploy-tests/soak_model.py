"""The contract's rules (docs/contract.md, "The Redis contract"), as a model the soak checks Redis
against: from the notifications a user's app accepted (answered 200), what the user's
hash must hold. Kept apart from the soak's machinery so it can be read on its own.

Where the rules make the end state depend on the order of arrival, the model says so
and checks only what every order agrees on: an email event that arrived before an
account deletion with a later event time moved `email_forwarding_at` and the last event
before the deletion pinned them."""

from dataclasses import dataclass

REVOCATIONS = ("consent-revoked", "account-deleted")
EMAIL_EVENTS = ("email-enabled", "email-disabled")
KNOWN_TYPES = REVOCATIONS + EMAIL_EVENTS
# Apple's older spelling of account deletion is the same event.
SPELLINGS = {"account-delete": "account-deleted"}


def normalised_type(raw_type):
    """The stream's `type` for a type as Apple sent it."""
    raw_type = SPELLINGS.get(raw_type, raw_type)
    return raw_type if raw_type in KNOWN_TYPES else "unknown"


@dataclass(frozen=True)
class Notification:
    sub: str
    raw_type: str
    event_time: int  # ms
    jti: str
    email: str = None
    is_private_email: bool = None

    @property
    def type(self):
        return normalised_type(self.raw_type)


def expected_user(notifications):
    """(exact, bounds): `exact` maps each field of the user hash to its value, None where
    the field must be absent; `bounds` maps a field whose value depends on the order of
    arrival to the (lowest, highest) event time it may hold. An empty `exact` means no
    hash at all. Event times of one user's events are distinct (the soak plans them so):
    on a tie the rules keep the first arrival, which no model without the order can say."""
    known = [n for n in notifications if n.type in KNOWN_TYPES]
    if not known:
        return {}, {}  # unknown types change nothing
    consents = [n.event_time for n in known if n.type == "consent-revoked"]
    deletions = [n.event_time for n in known if n.type == "account-deleted"]
    emails = [n for n in known if n.type in EMAIL_EVENTS]

    exact = {
        "consent_revoked_at": max(consents, default=None),  # revocation times are maxima
        "account_deleted_at": max(deletions, default=None),
        "sessions_revoked_at": max(consents + deletions, default=None),
        "refresh_token_refused_at": None,  # only reconcile writes it
    }
    bounds = {}
    if deletions:
        # Deletion purges the address and pins forwarding to disabled; email events that
        # arrived before it may have moved email_forwarding_at past the deletion time.
        exact.update(email=None, is_private_email=None, email_forwarding="disabled")
        bounds["email_forwarding_at"] = (max(deletions), max([max(deletions)] + [n.event_time for n in emails]))
    elif emails:
        latest = max(emails, key=lambda n: n.event_time)  # the latest email event wins
        exact.update(
            email=latest.email,
            is_private_email=None if latest.is_private_email is None else str(latest.is_private_email).lower(),
            email_forwarding="enabled" if latest.type == "email-enabled" else "disabled",
            email_forwarding_at=latest.event_time)
    else:
        exact.update(email=None, is_private_email=None, email_forwarding=None, email_forwarding_at=None)

    if deletions:
        # Email events after the deletion's arrival are stale: the last applied event is
        # the latest revocation or an email event that arrived earlier.
        bounds["last_event_at"] = (max(consents + deletions), max(n.event_time for n in known))
    else:
        latest = max(known, key=lambda n: n.event_time)
        exact.update(last_event_type=latest.type, last_event_at=latest.event_time, last_jti=latest.jti)
    return {field: None if value is None else str(value) for field, value in exact.items()}, bounds


def user_problems(notifications, stored):
    """What is wrong with `stored` (the user hash as HGETALL gives it) against the model;
    an empty list when it is right."""
    exact, bounds = expected_user(notifications)
    if not exact:
        return [] if not stored else [f"a hash exists for unknown types only: {sorted(stored)}"]
    problems = []
    for field, value in exact.items():
        if stored.get(field) == value:
            continue
        if field == "email" and value is not None and stored.get(field) is not None:
            problems.append("email: stored another address than the rules give")  # never an address in a report
        else:
            problems.append(f"{field}: stored {shown(field, stored.get(field))}, the rules give {shown(field, value)}")
    for field, (lowest, highest) in bounds.items():
        text = stored.get(field)
        if text is None or not text.isdigit() or not lowest <= int(text) <= highest:
            problems.append(f"{field}: stored {text!r}, the rules give a time in [{lowest}, {highest}]")
    if "last_event_at" in bounds and not problems:
        # Whichever event it is, the three last_* fields name the same one.
        named = [n for n in notifications if n.jti == stored.get("last_jti")]
        if not named or str(named[0].event_time) != stored["last_event_at"] or named[0].type != stored.get(
                "last_event_type"):
            problems.append(f"last_*: {stored.get('last_event_type')!r} at {stored.get('last_event_at')!r} with "
                            f"jti {stored.get('last_jti')!r} is not one accepted event")
    if "updated_at" not in stored:
        problems.append("updated_at missing")
    allowed = set(exact) | set(bounds) | {"last_event_type", "last_event_at", "last_jti", "updated_at"}
    extra = sorted(set(stored) - allowed)
    if extra:
        problems.append(f"fields outside the contract: {extra}")
    return problems


def shown(field, value):
    """A value for a report line; an address never (only whether there is one)."""
    if field == "email" and value is not None:
        return "an address"
    return repr(value)
