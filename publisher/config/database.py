"""The [database] section: where the event log and the published tables are, and as whom the
publisher connects; its password kept out of every URL that is shown."""
from __future__ import annotations

import contextlib
import dataclasses
import re
from dataclasses import dataclass, field

from publisher.dialects import UnknownDialectError, dialect_of, file_url


@dataclass(frozen=True)
class DatabaseConfig:
    url: str = file_url("publisher.db")
    """SQLAlchemy URL of the database that holds the event log and the published tables."""
    user: str | None = None
    """The publisher's own database user, for loopback; default: the connection's user."""
    schema: str | None = None
    """Schema of the tables and `schema=` in associations; default: the database's own."""
    password: str | None = field(default=None, repr=False)
    """Password for the URL's user, best set by PUBLISHER_DATABASE_PASSWORD; never printed."""

    def sqlalchemy_url(self) -> str:
        """The URL with the password filled in and what its database needs (`Dialect.url`: a
        relative file path made absolute, a driver and character set): for connections
        only, never for display."""
        from sqlalchemy.engine import make_url

        url = make_url(self.url)
        if self.password is not None:
            url = url.set(password=self.password)
        with contextlib.suppress(UnknownDialectError):  # connect() says so, naming database.url
            url = dialect_of(url.get_backend_name()).url(url)
        return url.render_as_string(hide_password=False)

    def display_url(self) -> str:
        """The URL as logs and messages may show it: the password masked."""
        return mask_url(self.url)

    def redact(self, text: str) -> str:
        """`text` with every form of the password masked: for driver messages that might echo it."""
        from urllib.parse import quote, quote_plus, unquote

        secrets = {self.password}
        inline = _INLINE_PASSWORD.search(self.url)
        if inline:
            secrets |= {inline.group(2), unquote(inline.group(2))}
        for secret in sorted((s for s in secrets if s), key=len, reverse=True):
            for form in {secret, quote(secret, safe=""), quote_plus(secret)}:
                text = text.replace(form, "***")
        return text

    def __repr__(self) -> str:
        """Like the generated repr, but a password inside the URL is masked too."""
        shown = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.repr}
        shown["url"] = self.display_url()
        return f"{type(self).__name__}({', '.join(f'{name}={value!r}' for name, value in shown.items())})"


_INLINE_PASSWORD = re.compile(r"(://[^/@:]*:)([^@]*)@")


def mask_url(url: str) -> str:
    """A database URL with its password masked, even when it does not parse."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return _INLINE_PASSWORD.sub(r"\1***@", url)
