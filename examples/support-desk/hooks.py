"""The support desk's own hook, named ``hooks:PrivacyHook`` in harness.yaml.

A support reply must never ask a customer to type payment or login secrets into the chat, and never
show a long digit run (a card number, wherever it came from). Such a reply is sent back to the model
with the reason, like any failed stop check.
"""

from __future__ import annotations

import re
from typing import Any

from hat.harness.hooks import Hook, HookContext, Verdict

SECRETS = re.compile(r"\b(card number|cvv|cvc|security code|password|pin code|one-time code)\b", re.I)
LONG_DIGITS = re.compile(r"(?:\d[ -]?){13,19}")


class PrivacyHook(Hook):
    name = "privacy"

    def stop_check(self, ctx: HookContext, reply: dict[str, Any]) -> Verdict | None:
        text = str(reply.get(ctx.harness.output.reply_field, ""))
        asked = SECRETS.search(text)
        if asked:
            reason = f"never ask for or mention a {asked.group(1).lower()}; the team verifies payments privately"
            return Verdict.retry(self.feedback(reason))
        if LONG_DIGITS.search(text):
            return Verdict.retry(self.feedback("the reply contains a long run of digits; leave it out"))
        return None
