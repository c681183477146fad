'use strict'
// Decides IAM requests with @cloud-copilot/iam-simulate (package.json), offline.
// stdin:  {"policySets": {"<id>": [{"name": ..., "policy": {...}}]},
//          "requests": [{"policySet": "<id>", "principal": "<arn>", "action": "dynamodb:PutItem",
//                        "resource": "<arn or *>", "account": "123456789012", "context": {"<key>": ["<value>"]}}]}
// stdout: {"decisions": [{"decision": "Allowed" | "ImplicitlyDenied" | "ExplicitlyDenied" | "Error",
//                         "error": "<why the simulator refused the request>"}]}, in the order of the requests.
// Called by punctual_tools.iam.simulate, once per batch.
const { runSimulation } = require('@cloud-copilot/iam-simulate')

async function decide(policySets, request) {
  const result = await runSimulation(
    {
      request: {
        principal: request.principal,
        action: request.action,
        resource: { resource: request.resource, accountId: request.account },
        contextVariables: request.context || {}
      },
      identityPolicies: policySets[request.policySet],
      serviceControlPolicies: [],
      resourceControlPolicies: []
    },
    {}
  )
  if (result.resultType === 'error') {
    return { decision: 'Error', error: JSON.stringify(result.errors) }
  }
  return { decision: result.overallResult }
}

async function main() {
  const input = JSON.parse(require('fs').readFileSync(0, 'utf8'))
  const decisions = []
  for (const request of input.requests) {
    decisions.push(await decide(input.policySets, request))
  }
  process.stdout.write(JSON.stringify({ decisions }))
}

main().catch((error) => {
  process.stderr.write(String((error && error.stack) || error))
  process.exit(1)
})
