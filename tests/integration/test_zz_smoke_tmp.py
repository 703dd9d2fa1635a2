import re
from tests.conftest import csrf_from
def test_smoke(app, client, owner, make_experiment):
    n = make_experiment("Curriculum (MODERATE confidence)", status="clean_result_drafting")
    html = open("tests/fixtures/results/clean_result.html").read()
    r = client.get(f"/experiments/{n}")
    assert r.status_code == 200, r.text[:3000]
    token = csrf_from(r.text)
    r = client.post(f"/experiments/{n}/clean-result", data={"csrf_token": token, "html": html, "title": "Curriculum ordering changes loss by <1% (MODERATE confidence)"})
    assert r.status_code == 303, r.text[:3000]
    r = client.get(f"/experiments/{n}")
    assert r.status_code == 200
    print(r.headers["Content-Security-Policy"])
    assert "srcdoc" in r.text
    r = client.post(f"/experiments/{n}/clean-result/preview", data={"csrf_token": token, "html": html + "<script>x</script>", "title": "x"}, headers={"HX-Request": "true"})
    print(r.status_code, r.text[:800])
    url = re.search(r'src="([^"]+)"', r.text).group(1)
    r = client.get(url); print(r.status_code, r.headers["Content-Security-Policy"], r.text[:300])
    r = client.post("/settings/share-links", data={"csrf_token": token, "scope": "experiment", "experiment": str(n), "label": "Ada"})
    assert r.status_code == 200, r.text[:2000]
    share = re.search(r'value="(http://localhost/s/[^"]+)"', r.text).group(1)
    anon = app.test_client()
    r = anon.get(share.replace("http://localhost", ""))
    print(r.status_code, dict(r.headers))
    assert r.status_code == 200, r.text
    assert "Set-Cookie" not in r.headers
