"""Lambda's IAM rules, checked offline: the AWS calls each function makes, judged against its role in template.yaml.

* :mod:`.calls`: what IAM is asked for by one botocore call (action, resource ARN, ``dynamodb:LeadingKeys``);
* :mod:`.recorder`: botocore hooks that see every call of the clients a function builds;
* :mod:`.policies`: a function's role, its intrinsic functions resolved to the ARNs of one deployment;
* :mod:`.simulate`: the evaluator (@cloud-copilot/iam-simulate, on node) and its cache of decisions;
* :mod:`.live`: the opt-in check of a local process (``PUNCTUAL_IAM_CHECK=1``), which refuses what the role does
  not allow, as Lambda would.

Tooling only: nothing in the ``punctual`` package (the Lambda layer) imports it.
"""

from punctual_tools.iam.calls import AccessRequest, AwsCall, KeyNames, requests_of
from punctual_tools.iam.live import IamCheck, IamDeniedError, check_client, check_enabled, install_iam_check
from punctual_tools.iam.policies import RolePolicies, Stack, function_roles, role_policies
from punctual_tools.iam.recorder import CallRecorder
from punctual_tools.iam.simulate import Decision, Judge, Verdict, judge_calls

__all__ = [
    "AccessRequest",
    "AwsCall",
    "CallRecorder",
    "Decision",
    "IamCheck",
    "IamDeniedError",
    "Judge",
    "KeyNames",
    "RolePolicies",
    "Stack",
    "Verdict",
    "check_client",
    "check_enabled",
    "function_roles",
    "install_iam_check",
    "judge_calls",
    "requests_of",
    "role_policies",
]
