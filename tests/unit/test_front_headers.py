"""front/headers.py: the one reader of raw request headers, for the layers before Flask and
the access rule — its answers on the shapes clients really send and on the odd ones."""
import pytest

from front import headers


@pytest.mark.parametrize("header, secret", [
    ("Bearer spt_abc", "spt_abc"), ("bearer  sk_x ", "sk_x"), ("BEARER t", "t"),
    ("Basic dXNlcg==", None), ("Bearer", None), ("", None), ("Bearerspt_abc", None)])
def test_a_bearer_secret_is_read_whatever_the_case_and_nothing_else_is(header, secret):
    """Is the token of any-case `Bearer …` read, and a Basic header or a bare word not?"""
    assert headers.bearer_secret(header) == secret


@pytest.mark.parametrize("raw, length", [("15000", 15000), (" 7 ", 7), ("0", 0), ("", None), (None, None),
                                         ("-1", None), ("1 2", None), ("0x10", None), ("1e3", None)])
def test_a_content_length_is_a_plain_decimal_or_none(raw, length):
    """Is only a plain decimal Content-Length taken, and a sign, a space inside, hex or an exponent not?"""
    environ = {} if raw is None else {"CONTENT_LENGTH": raw}
    assert headers.content_length(environ) == length


def test_a_streamed_body_and_the_media_type():
    """Is Transfer-Encoding seen as a streamed body, and the media type read without parameters?"""
    assert headers.streamed_body({"HTTP_TRANSFER_ENCODING": "chunked"}) and not headers.streamed_body({})
    assert headers.media_type({"CONTENT_TYPE": "Application/JSON; charset=utf-8"}) == "application/json"
    assert headers.media_type({}) == ""


@pytest.mark.parametrize("environ, swap", [
    ({"HTTP_HX_REQUEST": "true"}, True), ({"HTTP_HX_REQUEST": "TRUE"}, True), ({}, False),
    ({"HTTP_HX_REQUEST": "true", "HTTP_HX_BOOSTED": "true"}, False),
    ({"HTTP_HX_REQUEST": "true", "HTTP_HX_HISTORY_RESTORE_REQUEST": "true"}, False)])
def test_an_htmx_swap_is_told_from_boosted_navigation_and_history_restore(environ, swap):
    """Is a plain htmx request a swap, and a boosted one or a history restore not?"""
    assert headers.is_fragment_request(environ) is swap
