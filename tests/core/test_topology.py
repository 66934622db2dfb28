"""Redis URLs: one server, a cluster or sentinels, parsed and checked where they enter."""

from __future__ import annotations

import re

import pytest

from queuecore.core.config import ConnectionConfig
from queuecore.core.errors import ConfigurationError
from queuecore.core.topology import parse_redis_url, redact_url


def test_a_cluster_url_names_its_seed_nodes() -> None:
    target = parse_redis_url("redis+cluster://app:s3cret@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002/")
    assert (target.kind, target.nodes) == ("cluster", (("10.0.0.1", 7000), ("10.0.0.2", 7001), ("::1", 7002)))
    assert (target.username, target.password, target.tls) == ("app", "s3cret", False)
    assert parse_redis_url("rediss+cluster://h:7000/0?ssl_cert_reqs=none").options == {"ssl_cert_reqs": "none"}
    assert parse_redis_url("redis+cluster://h:7000,h:7000").nodes == (("h", 7000),)  # repeated: once


def test_a_plain_url_stays_redis_pys() -> None:
    assert parse_redis_url("redis://localhost:6379/2").kind == "single"
    assert parse_redis_url("unix:///run/redis.sock?db=1").kind == "single"
    for url in ("redis://h", "redis://h/", "redis://u:pw@h:1/3?socket_timeout=2&client_name=x&protocol=3",
                "rediss://h:1/0?ssl_cert_reqs=none&ssl_ca_certs=/etc/ca.pem", "redis://h:1/0?max_connections=5"):
        assert parse_redis_url(url).url == url  # options redis-py takes pass, as given


@pytest.mark.parametrize(("url", "why"), [
    ("http://h:1", "use redis://"),
    ("redis+cluster://h", "not host:port"),
    ("redis+cluster://h:0", "not host:port"),
    ("redis+cluster://h:70000", "not host:port"),
    ("redis+cluster://:pw@/", "at least one host"),
    ("redis+cluster://h:1/3", "database 0 only"),
    ("redis+cluster://h:1/?db=2", "unknown option 'db'"),
    ("redis+cluster://h:1/?ssl_certfile=x", "needs a TLS scheme"),
    ("rediss+cluster://h:1/?ssl_cert_reqs=maybe", "ssl_cert_reqs must be"),
    ("redis+cluster://h:1/?sentinel_password=x", "unknown option"),
    ("redis+cluster://h:1/#frag", "fragment"),
    ("redis://h:99999/", "out of range"),
    # one server: what redis-py would refuse only at the first command (a TypeError, a ConnectionError
    # "protocol must be either 2 or 3"), or misread (a path that is not a number was database 0)
    ("redis://h:6379/0?bogus=1", "unknown option 'bogus'"),
    ("redis://h:6379/0?ssl_cert_reqs=none", "unknown option 'ssl_cert_reqs'"),
    ("unix:///run/redis.sock?ssl_ca_certs=x", "unknown option 'ssl_ca_certs'"),
    ("redis://h:6379/0?socket_timeout=abc", "Invalid value for 'socket_timeout'"),
    ("redis://h:6379/0?db=x", "Invalid value for 'db'"),
    ("redis://h:6379/abc", "not a database number"),
    ("redis://h:6379/0?protocol=9", "protocol must be 2 or 3"),
    # parsed by redis-py, but port 0 meant its default 6379 (an enqueue reached another server), and
    # these values failed only at the first command, with redis-py's own error
    ("redis://h:0/0", "port 0 is not a port"),
    ("redis://h:0", "port 0 is not a port"),
    ("redis://h:6379/0?socket_timeout=-1", "socket_timeout must be a number of seconds above 0"),
    ("redis://h:6379/0?socket_timeout=nan", "socket_timeout must be"),
    ("redis://h:6379/0?socket_connect_timeout=0", "socket_connect_timeout must be"),
    ("redis://h:6379/0?health_check_interval=-3", "health_check_interval must not be negative"),
    ("rediss://h:6379/0?ssl_cert_reqs=bogus", "ssl_cert_reqs must be one of none, optional, required"),
    ("redis+cluster://" + ",".join(f"h{i}:1" for i in range(65)), "at most 64"),
    ("redis+sentinel://h:26379/m/16", "not a number from 0 to 15"),
    ("redis+sentinel://h:26379/m/\u00b2", "not a number from 0 to 15"),  # a digit to isdigit(), not to int()
    ("redis+sentinel://h:26379/m/\u0663", "not a number from 0 to 15"),  # Arabic-Indic 3: was db 3
])
def test_bad_urls_are_refused_with_the_reason(url: str, why: str) -> None:
    with pytest.raises(ConfigurationError, match=why):
        ConnectionConfig(redis_url=url)


@pytest.mark.parametrize("value", [None, "", 7, b"redis://h:1"])
def test_a_url_that_is_not_a_string_is_refused(value: object) -> None:
    with pytest.raises(ConfigurationError, match="non-empty string"):
        parse_redis_url(value)


def test_passwords_never_reach_an_error_or_a_log_line() -> None:
    with pytest.raises(ConfigurationError) as refused:
        ConnectionConfig(redis_url="redis+cluster://u:hunter2@h:1/?bad=1")
    assert "hunter2" not in str(refused.value) and "u:***@h:1" in str(refused.value)
    assert redact_url("redis+sentinel://:pw@s:1,s:2/m?sentinel_password=pw2") == \
        "redis+sentinel://:***@s:1,s:2/m?sentinel_password=***"
    assert redact_url("redis://u:pw@h:6379/0") == "redis://u:***@h:6379/0"
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"


def what_the_config_shows(url: str) -> str:
    """What a URL's ConnectionConfig shows of it: the refusal's message, else its repr."""
    try:
        return repr(ConnectionConfig(redis_url=url))
    except ConfigurationError as refused:
        return str(refused)


@pytest.mark.parametrize("url", [
    "redis://:se/cret@db.example:6379/0", "redis://:pa#ss@db.example:6379/0", "redis://u:p?ss@db.example:6379/0",
    "redis+cluster://:se/cret@db.example:7000", "redis+cluster://user:pa?ss@db:7000",
    "redis+sentinel://:se/cret@s:26379/m", "redis://:/123@host:6379/0",
    # accepted before, and connected elsewhere: to host "user", port 8080 (the password's start), or a path
    "redis://user:8080#abc@host:6379/0", "redis://user:8080?abc@host:6379/0", "unix://:pa/ss@/tmp/redis.sock"])
def test_a_password_holding_unencoded_specials_reaches_no_error_whole_or_in_part(url: str) -> None:
    """A review: a "/", "?" or "#" in a password made the URL's parts come out wrong, and the error (ours,
    or urllib's port error) quoted a piece of the password."""
    secret_pieces = {"se", "cret", "pa", "ss", "p", "123", "8080", "abc"}
    with pytest.raises(ConfigurationError) as refused:
        ConnectionConfig(redis_url=url)
    message = str(refused.value)
    assert "percent-encode those" in message
    quoted = message.split("'")[1]  # the URL as shown
    assert "***@" in quoted and not secret_pieces & set(re.split(r"[^A-Za-z0-9]+", quoted.split("@")[0]))
    assert "cast to integer" not in message and "is not host:port" not in message


def test_reprs_hide_the_password() -> None:
    """A review: repr() of a connection (a traceback's locals, Django's debug page) showed the URL whole."""
    config = ConnectionConfig(redis_url="redis://:hunter2@127.0.0.1:6379/0")
    assert "hunter2" not in repr(config) and "redis://:***@127.0.0.1:6379/0" in repr(config)
    target = parse_redis_url("redis+sentinel://u:hunter2@s:26379/m?sentinel_password=hunter3")
    assert "hunter" not in repr(target) and "u:***@s:26379" in repr(target)
    assert redact_url("redis+sentinel://s:26379/m?sentinel_password=p@ss") == \
        "redis+sentinel://s:26379/m?sentinel_password=***"  # an "@" in an option's password ends no credentials


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://:s3cret@127.0.0.1:6379\r", "redis://:***@127.0.0.1:6379\r"),  # a CRLF env file
    ("redis://:secret@host:6379 ", "redis://:***@host:6379 "),
    ("redis://:secret@hôst:6379/0", "redis://:***@hôst:6379/0"),
    ("rediss://u:secret@host:6379/0?ssl_ca_certs=/etc/a@b.pem", "rediss://u:***@host:6379/0?ssl_ca_certs=/etc/a@b.pem"),
    ("redis://:a@b@host:6379", "redis://***@host:6379"),
    ("redis://host:0/0?client_name=me@x", "redis://host:0/0?client_name=me@x"),  # an option's value's "@"
])
def test_redaction_never_shows_a_password_and_keeps_the_host_when_it_can(url: str, shown: str) -> None:
    """A review of the first version of the redaction above: a host holding a character outside a fixed
    set (a trailing CR, a space, "ô") left the URL whole, password included; an "@" in an option's
    value hid the host."""
    assert redact_url(url) == shown
    try:
        ConnectionConfig(redis_url=url)
    except ConfigurationError as refused:
        assert "secret" not in str(refused) and "s3cret" not in str(refused)


@pytest.mark.parametrize(("url", "shown", "secret"), [
    ("redis://:a@b/c@db.example:6379/0", "redis://***@db.example:6379/0", "b/c"),
    ("redis://u:a@b?c@db.example:6379/0", "redis://***@db.example:6379/0", "b?c"),
    ("redis+sentinel://:a@b/c@s:26379/m", "redis+sentinel://***@s:26379/m", "b/c"),
    ("redis://:a?x=y@db.example:6379/0", "redis://***@db.example:6379/0", "x=y"),
    ("redis://127.0.0.1:6379/0?password=ab#cd", "redis://127.0.0.1:6379/0?password=***", "cd"),
    ("redis://127.0.0.1:6379/0?pass%77ord=Sekr1t", "redis://127.0.0.1:6379/0?pass%77ord=***", "Sekr1t"),
    ("redis+sentinel://s:26379/m?sentinel_pass%77ord=Sekr1t", "redis+sentinel://s:26379/m?sentinel_pass%77ord=***",
     "Sekr1t"),
])
def test_no_piece_of_a_password_is_shown_whatever_else_the_url_holds(url: str, shown: str, secret: str) -> None:
    """A review: a password with an unencoded "@" and "/" or "?" showed its tail (the first "@" was taken
    for the credentials' end); a ``password=`` option's value showed past a "#"; and an option name
    spelled percent-encoded (which redis-py decodes, and logs in with) was not masked at all."""
    assert redact_url(url) == shown
    assert secret not in what_the_config_shows(url)


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379/0?client_name=me@host",
                                 "unix:///tmp/sock@dir/redis.sock?db=0"])
def test_an_at_sign_of_a_valid_url_neither_hides_its_host_nor_refuses_it(url: str) -> None:
    """A review: an "@" in an option's value hid the host, port and database (``redis://***@host``), and a
    unix socket's path holding an "@" was refused with advice about passwords."""
    assert redact_url(url) == url
    assert ConnectionConfig(redis_url=url).redis_url == url
    with pytest.raises(ConfigurationError, match="unknown option 'bogus'"):  # the refusal says what is wrong
        ConnectionConfig(redis_url=url + "&bogus=1")


@pytest.mark.parametrize(("url", "shown"), [
    ("redis+sentinel://:Tr0ub&x=9@h:26379/m?sentinel_password=SECRET",
     "redis+sentinel://:***@h:26379/m?sentinel_password=***"),
    ("redis://h:6379/0?client_name=a?password=SECRET", "redis://h:6379/0?client_name=a?password=***"),
    ("rediss://h:6379/0?ssl_password=SECRET&ssl_cert_reqs=none", "rediss://h:6379/0?ssl_password=***&ssl_cert_reqs=none"),
    ("redis://:123?x=SECRET@127.0.0.1:6392/0", "redis://***@127.0.0.1:6392/0"),
])
def test_a_password_option_is_hidden_wherever_other_text_stands(url: str, shown: str) -> None:
    """A review: text before a password option that only looked like an option (``&x=9@h...`` in the
    credentials) swallowed it whole and it was shown; ``ssl_password`` was not hidden at all; and a
    password of digits (``:123``, a port to a parser) with an option-like tail was quoted by the error."""
    assert redact_url(url) == shown
    assert "SECRET" not in what_the_config_shows(url)


@pytest.mark.parametrize("url", ["unix://default@/tmp/r@d/redis.sock", "redis://[fe80::1%25eth0]:6379/0?client_name=a@b",
                                 "redis://u@h:6379/0?client_name=x@y"])
def test_valid_urls_with_an_at_sign_or_a_zone_are_taken_and_shown_whole(url: str) -> None:
    """A review: a unix socket's path holding an "@" after a user name was refused, and an IPv6 address with
    a zone id was taken for a password's piece (the host hidden)."""
    assert redact_url(url) == url
    assert ConnectionConfig(redis_url=url).redis_url == url



@pytest.mark.parametrize(("url", "secret"), [
    ("redis:/user:S3cretPw@host:6379/0", "S3cretPw"),  # no "://": a typo
    ("redis://u:123?TopSecret=1@host:6379/0", "TopSecret"),  # the refusal's reason quoted the option's name
    ("redis+cluster://u:99999?x=y@h:7000/", "99999"),  # ... or the host:port it read
    ("redis://h:6379/0?password=Top&Secret", "Secret"),  # an unencoded "&" in an option's password
    ("redis://h:6379/0?password=p@ssWORD42&bogus=1", "ssWORD42"),  # an "@" in it, in a refused URL
    ("redis+sentinel://s:26379/m?sentinel_password=p@ssWORD42&client_name=x&bogus=1", "ssWORD42"),
    ("redis://:pa[SECRETPART]ss@h:6379/0", "SECRETPART"),  # urllib's error quoted it
])
def test_a_refused_url_s_error_shows_no_piece_of_its_password(url: str, secret: str) -> None:
    """A review of the redaction: the URL shown was right, but the reason quoted a piece of the password,
    or the URL shown was cut at an "@" inside a password option's value, or had no "://" at all."""
    with pytest.raises(ConfigurationError) as refused:
        ConnectionConfig(redis_url=url)
    assert secret not in str(refused.value)
    # redact_url alone (for a URL that was taken) cannot tell "u:123?TopSecret=1@host" from host u, port 123
    assert secret not in redact_url(url) or "?" in url.split("@")[0]


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://:pw@redis.example.com:6379/0?client_name=app@prod",
     "redis://:***@redis.example.com:6379/0?client_name=app@prod"),
    ("redis+sentinel://:pw@h1:26379,h2:26379/mymaster/0?sentinel_password=x@y",
     "redis+sentinel://:***@h1:26379,h2:26379/mymaster/0?sentinel_password=***"),
])
def test_a_password_without_a_user_name_keeps_the_host_shown(url: str, shown: str) -> None:
    """A review: the check for a port without a host (":123", which may be a password) looked at the
    credentials too, so every ``:password@host`` URL with an "@" in an option showed as ``***@<tail>``."""
    assert redact_url(url) == shown
    assert ConnectionConfig(redis_url=url).redis_url == url


@pytest.mark.parametrize("url", [
    "redis://:6379/0?password=abc@SECRETPW",  # taken: the last "@" was inside the password option's value
    "redis://:6379/0?client_name=me&password=p@SECRETPW",
    "redis://h:6379/0?password=ab#cd@SECRETPW",  # refused: the same cut, in the error
    "redis://h:6379/0?password=pa&ss@SECRETPW",
    "redis://h:6379/0?password=abc&=SECRETPW",  # an empty option name ended the value
    "redis:/localhost:6379/0?password=SECRETPW",  # no "://": option passwords were shown whole
    "unix://u:ab@/SECRETPW@/run/redis.sock",  # a unix path's "@" after a password (not only a user name)
    "redis://user:?a=SECRETPW@host:6379/0",  # a ":" without a port: a password's start
    "redis://user:XQ@SECRETPW+?QQ=J@10.0.0.1:1/0",  # found by a fuzzer: a host no host has
    "redis://us:JZ=@?SECRETPW=@@10.0.0.1:6379/3",  # ... no host at all
    "redis://default:]:@QX?%=/SECRETPW@[::1]/3",  # ... an option's name no option has
    "rediss://us:Z[QQ:@/[?SECRETPW=[@h.x/3",  # ... a path no path has
])
def test_no_at_sign_or_ampersand_in_a_password_option_shows_a_piece_of_it(url: str) -> None:
    """A second review of the redaction: the "@" that ends the credentials was looked for in password
    options' values too, an empty option name ended such a value, text without "://" kept them whole,
    and a password before a unix path holding an "@" was shown in part."""
    assert "SECRETPW" not in redact_url(url)
    assert "SECRETPW" not in what_the_config_shows(url)
