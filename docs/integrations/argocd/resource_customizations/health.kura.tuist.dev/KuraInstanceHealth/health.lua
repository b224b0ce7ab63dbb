-- Argo CD health check for health.kura.tuist.dev/KuraInstanceHealth, the
-- companion object the kura-health-agent writes its verdict on when it
-- publishes beside Kura's own controller (companion mode,
-- docs/integrations.md). The same conditions as on a KuraInstance in
-- instance mode, read the same way:
--   RolloutHardStopped True                      -> Degraded    (the gate stopped the rollout)
--   RolloutHealthy True                          -> Healthy
--   RolloutHealthy Unknown, InstanceSuspended    -> Suspended   (the instance is suspended: no pods)
--   RolloutHealthy False                         -> Suspended   (held by the gate: the soak clock
--                                                                restarts once the check passes)
--   RolloutHealthy Unknown or absent             -> Progressing (not judged yet, or the pods do not
--                                                                all run the target image yet)
--   being deleted (metadata.deletionTimestamp)  -> Progressing (whatever the verdict said)
-- Unlike on a KuraInstance, there is no generation to compare: the
-- conditions' observedGeneration is the KuraInstance's generation they
-- judged, which this object does not carry (its own metadata.generation
-- stays 1). Right after the instance's spec changes, until the agent's next
-- sweep, this object still states the previous generation's verdict.
-- Runs with only the libraries Argo CD opens for an argocd-cm check:
-- package, base and table (no string, math, os or io).
local hs = {}

-- Being deleted (with its KuraInstance, by its owner reference): never
-- Healthy, whatever its last verdict.
if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Pending deletion"
  if obj.metadata.finalizers ~= nil and #obj.metadata.finalizers > 0 then
    hs.message = "Pending deletion; blocked by finalizers: " .. table.concat(obj.metadata.finalizers, ", ")
  end
  return hs
end

local function condition(conditions, type_)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if c.type == type_ then
      return c
    end
  end
  return nil
end

local function describe(c)
  local reason = c.reason or ""
  if c.message ~= nil and c.message ~= "" then
    return reason .. ": " .. c.message
  end
  return reason
end

local conditions = nil
if obj.status ~= nil then
  conditions = obj.status.conditions
end
local healthy = condition(conditions, "RolloutHealthy")
local stopped = condition(conditions, "RolloutHardStopped")

if healthy == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the kura-health-agent to judge this instance"
  return hs
end

local judged = ""
if healthy.observedGeneration ~= nil then
  judged = " (instance generation " .. healthy.observedGeneration .. ")"
end

if stopped ~= nil and stopped.status == "True" then
  hs.status = "Degraded"
  hs.message = "Hard stop: " .. describe(stopped) .. judged
  return hs
end

if healthy.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(healthy) .. judged
  return hs
end

if healthy.status == "Unknown" and healthy.reason == "InstanceSuspended" then
  hs.status = "Suspended"
  hs.message = "Instance suspended: " .. describe(healthy) .. judged
  return hs
end

if healthy.status == "False" then
  hs.status = "Suspended"
  hs.message = "Held by the rollout gate: " .. describe(healthy) .. judged
  return hs
end

hs.status = "Progressing"
hs.message = describe(healthy) .. judged
return hs
