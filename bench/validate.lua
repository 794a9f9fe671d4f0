-- wrk script: POST /v1/agents/validate with the full spec of testdata/full-spec.yaml (as {"yaml": ...}).
-- The body file is written by bench/foundation.sh.
local f = assert(io.open(os.getenv("BODY_FILE") or "bench/.validate-body.json", "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"

function response(status, headers, body)
  if status ~= 200 then
    error("unexpected status " .. status .. ": " .. body)
  end
end
