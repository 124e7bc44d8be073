-- Argo CD health of a floe KafkaIcebergTopic, from what the operator writes on its status
-- (operator/floe_operator/status.py): phase Pending | Running | Degraded | RolledBack | Failed |
-- Suspended, and a Ready condition whose reason says what is wrong. A rolled-back topic lands,
-- but with an older spec than the one written: Degraded, so the change is looked at.
local hs = {status = "Progressing", message = "Waiting for the floe operator"}

local function ready_condition(status)
  if status.conditions == nil then
    return nil
  end
  for _, condition in ipairs(status.conditions) do
    if condition.type == "Ready" then
      return condition
    end
  end
  return nil
end

-- Reasons that will not clear by waiting: the spec must change, Kafka deleted records the
-- table has not got, or the Spark job failed (the operator keeps failing it over meanwhile).
local function failed_reason(reason)
  return reason == "InvalidSpec" or reason == "DataLoss"
    or (reason ~= nil and string.find(reason, "Failed$") ~= nil)
end

local status = obj.status
local generation = obj.metadata.generation or 0
-- Until the operator has seen this generation, the status describes an older spec.
if status == nil or status.observedGeneration == nil
    or status.observedGeneration < generation then
  hs.message = "Waiting for the floe operator to observe generation " .. tostring(generation)
  return hs
end

local ready = ready_condition(status)
if ready ~= nil and ready.message ~= nil and ready.message ~= "" then
  hs.message = ready.message
elseif status.phase ~= nil then
  hs.message = "phase " .. status.phase
end

if obj.spec ~= nil and obj.spec.suspend == true then
  hs.status = "Suspended"
elseif status.phase == "RolledBack" then
  hs.status = "Degraded"
elseif ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
elseif status.phase == "Failed" or status.phase == "Degraded"
    or (ready ~= nil and ready.status == "False" and failed_reason(ready.reason)) then
  hs.status = "Degraded"
end
return hs
