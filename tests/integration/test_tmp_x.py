from tests.integration.test_discussion import *
def test_x(app, htmx_client, make_experiment):
    number = make_experiment("Probe")
    response = htmx_client.post(f"/experiments/{number}/comments", headers={"X-CSRFToken": htmx_client.csrf},
                                data={"body": "**Why** 0.6%? <script>alert(1)</script> [x](javascript:alert(1))"})
    i = response.text.find("<script"); print(response.text[i-300:i+100])
