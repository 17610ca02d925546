"""Admission checks of claims: bad opaque configs refused at `kubectl apply`, not at Prepare.

The kubelet plugin refuses a claim whose `GpuConfig`/`MigDeviceConfig` is
misspelt only when a pod using it is scheduled (a `FailedPrepareDynamicResources`
event on a pending pod). The validating admission webhook (`dra-gpu webhook`)
runs the same checks when the ResourceClaim or ResourceClaimTemplate is
created, with the same code and so the same message.

* `review`: pure. An AdmissionReview in, a `Verdict` (and the AdmissionReview
  response) out; which checks run and why (`check_claim_spec`).
* `server`: the HTTPS server the API server calls (`POST
  /validate-resource-claim-parameters`, `GET /readyz`), TLS from the
  certificate files, reloaded when they change.

The port is here, not in `server`, so that `dra-gpu --help` and every other command
can name the webhook's default without importing the server and pydantic with it.
"""

from typing import Final

DEFAULT_PORT: Final = 443  # NVIDIA's webhook's default
