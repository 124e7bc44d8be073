-- Argo CD health of a floe KafkaIcebergOperation, from what the operator writes on its status
-- (operator/floe_operator/operation/status.py): phase Pending | Running | Succeeded | Failed,
-- and a message saying what it does or why it failed.
local hs = {status = "Progressing", message = "Waiting for the floe operator"}
local status = obj.status
if status == nil or status.phase == nil then
  return hs
end
if status.message ~= nil and status.message ~= "" then
  hs.message = status.message
end
if status.phase == "Succeeded" then
  hs.status = "Healthy"
elseif status.phase == "Failed" then
  hs.status = "Degraded"
end
return hs
