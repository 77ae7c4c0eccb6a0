"""The types of the commands' numeric options, whose errors argparse reports as usage errors."""
from __future__ import annotations

import argparse


def not_negative(text: str) -> int:
    return positive(text, least=0)


def positive(text: str, least: int = 1) -> int:
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if number < least:
        raise argparse.ArgumentTypeError(f"expected a number of at least {least}, got {number}")
    return number
