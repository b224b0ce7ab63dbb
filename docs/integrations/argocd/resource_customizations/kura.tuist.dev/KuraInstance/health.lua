-- Argo CD health check for kura.tuist.dev/KuraInstance, from the conditions
-- the kura-health-agent writes (docs/integrations.md):
--   RolloutHardStopped True                      -> Degraded    (the gate stopped the rollout)
--   RolloutHealthy True (current generation)     -> Healthy
--   RolloutHealthy Unknown, InstanceSuspended    -> Suspended   (the instance is suspended: no pods)
--   RolloutHealthy False                         -> Suspended   (held by the gate: the soak clock
--                                                                restarts once the check passes)
--   RolloutHealthy Unknown, absent, or about an  -> Progressing (not judged yet, or the pods do not
--   older metadata.generation                                    all run the target image yet)
--   being deleted (metadata.deletionTimestamp)  -> Progressing (whatever the verdict said)
-- Without the agent's conditions (companion mode, where the agent writes its
-- verdict on the KuraInstanceHealth of the same name and never this object;
-- or before its first write in instance mode):
--   spec.suspended, or phase Suspending or      -> Suspended
--   Suspended
--   Kura's controller's own status.rolloutHealth -> Healthy when it reports every pod sampled,
--   (no rolloutGate: companion mode)                ready and serving on spec.image for the current
--                                                   generation, else Progressing; the gate's verdict
--                                                   (holds, hard stops) is on the KuraInstanceHealth
--   nothing yet                                  -> Progressing (waiting for the agent)
-- Runs with only the libraries Argo CD opens for an argocd-cm check:
-- package, base and table (no string, math, os or io).
local hs = {}

-- A KuraInstance being deleted is never Healthy, whatever its last verdict.
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

local generation = nil
if obj.metadata ~= nil then
  generation = obj.metadata.generation
end

if healthy == nil then
  local status = obj.status or {}
  local spec = obj.spec or {}
  if spec.suspended == true or status.phase == "Suspending" or status.phase == "Suspended" then
    hs.status = "Suspended"
    hs.message = "Instance suspended (phase " .. tostring(status.phase) .. ")"
    return hs
  end
  local rh = status.rolloutHealth
  if rh ~= nil and status.rolloutGate == nil then
    -- Companion mode: this rolloutHealth is Kura's controller's own, and the
    -- agent's verdict is on the KuraInstanceHealth of the same name.
    local where = "; the rollout gate's verdict is on KuraInstanceHealth " ..
      tostring(obj.metadata.namespace) .. "/" .. tostring(obj.metadata.name)
    if generation ~= nil and status.observedGeneration ~= nil and status.observedGeneration < generation then
      hs.status = "Progressing"
      hs.message = "Waiting for Kura's controller to reconcile generation " .. generation ..
        " (it reconciled " .. status.observedGeneration .. ")" .. where
      return hs
    end
    local pods = tostring(rh.sampledPods) .. " of " .. tostring(rh.expectedPods) .. " pods sampled"
    local onImage = status.observedImage == nil or spec.image == nil or status.observedImage == spec.image
    if rh.ready == true and rh.serving == true and rh.ringConsistent ~= false and onImage and
        rh.sampledPods ~= nil and rh.expectedPods ~= nil and rh.sampledPods >= rh.expectedPods then
      hs.status = "Healthy"
      hs.message = "Kura's controller: " .. pods .. ", ready and serving" .. where
      return hs
    end
    hs.status = "Progressing"
    hs.message = "Kura's controller: " .. pods .. ", ready " .. tostring(rh.ready) ..
      ", serving " .. tostring(rh.serving) .. ", ring consistent " .. tostring(rh.ringConsistent) ..
      ", image " .. tostring(status.observedImage) .. " (spec " .. tostring(spec.image) .. ")" .. where
    return hs
  end
  hs.status = "Progressing"
  hs.message = "Waiting for the kura-health-agent to judge this instance"
  return hs
end
if generation ~= nil and healthy.observedGeneration ~= nil and healthy.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the kura-health-agent to judge generation " .. generation ..
    " (it judged " .. healthy.observedGeneration .. ")"
  return hs
end

if stopped ~= nil and stopped.status == "True" then
  hs.status = "Degraded"
  hs.message = "Hard stop: " .. describe(stopped)
  return hs
end

if healthy.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(healthy)
  return hs
end

if healthy.status == "Unknown" and healthy.reason == "InstanceSuspended" then
  hs.status = "Suspended"
  hs.message = "Instance suspended: " .. describe(healthy)
  return hs
end

if healthy.status == "False" then
  hs.status = "Suspended"
  hs.message = "Held by the rollout gate: " .. describe(healthy)
  return hs
end

hs.status = "Progressing"
hs.message = describe(healthy)
return hs
