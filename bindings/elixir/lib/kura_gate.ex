defmodule KuraGate do
  @moduledoc """
  The Kura rollout gate (contract/gate.md) inside the BEAM: may the next
  wave start? Every decision is made by the Rust gate (`kura-gate`) through
  a NIF; this module only moves documents across.

  ## Documents in

  Configuration, tick input and baselines are the contract's documents,
  given either as a JSON binary (e.g. as stored in Postgres) or as Elixir
  terms: maps, lists, strings, integers, booleans, `nil`, atoms for the
  enumerations (`:succeeded`, `:active`) and UTC `DateTime`s for times.
  Atom keys are Elixir style, snake_case (`wave_started_at:`), and stand for
  the contract's camelCase key (`"waveStartedAt"`); string keys are taken
  as they are, so a decoded contract document works unchanged.

  ## Answers out

  Verdicts are maps with snake_case atom keys, because that is what Elixir
  code pattern-matches on (`%{verdict: :hard_stop, signal: signal}`): the
  verdict kind (`:pass`, `:soak`, `:hard_stop`) and every signal are atoms,
  made from the gate's own closed vocabulary (`signals/0`), never from
  input. A verdict's `healthy_since` is the gate's RFC 3339 text, exact to
  the nanosecond the gate keeps (a `DateTime` holds microseconds only, so
  converting it would change the instant; `DateTime.from_iso8601/1` does
  that when you want it); any year the gate holds, before year 0 too. A
  captured baseline's `captured_at` is a `DateTime` (it was given as one).
  Such a map (a verdict, a captured baseline) can go back in as input as it
  is, and means exactly the same instant.

  Errors are `{:error, %KuraGate.Error{}}` with a code atom and a located
  message; nothing raises on bad input, and nothing in here can crash the
  BEAM (panics are caught and become `:internal`). Terms are read by the
  rules of the JSON path: nesting is limited to 128 levels, and two keys
  naming the same contract key (`:wave_started_at` and `"waveStartedAt"`)
  are refused like a repeated key in a JSON document; `decode_json/1`
  refuses repeated keys too.

  ## The gate is a handle

  A gate is a reference to state held by the NIF, updated in place by
  `tick/2` (the returned gate is the same handle). One process at a time
  should tick a gate; a concurrent call gets `{:error, %{code: :busy}}`.
  Persist it with `dump_state/1` and continue it with `restore/2`.
  A tick runs on the calling (normal) scheduler only while it is small
  (at most 10,000 terms and 64 KiB of strings, or a JSON binary of at most
  64 KiB; the NIF stops counting there: bounded work);
  larger ticks (and ticks of more than #{50} servers, sent there at once)
  and every other call that takes a document run on a dirty CPU scheduler.

  ## Example

      iex> config = %{soak_seconds: [900, 300]}
      iex> {:ok, gate} = KuraGate.new(config)
      iex> health = %{sampled_at: ~U[2026-07-21 09:59:55Z], expected_pods: 3,
      ...>   sampled_pods: 3, ready: true, serving: true, ring_consistent: true,
      ...>   bootstrap_inflight_peers: 0, backfill_degraded: false,
      ...>   backfill_budget_exhausted_peers: 0, outbox_messages: 120,
      ...>   fd_timeout_count: 4, peer_connection_failures: 0, memory_pressure_state: 0}
      iex> now = ~U[2026-07-21 10:00:00Z]
      iex> {:ok, baseline} = KuraGate.capture_baseline(gate, now, health)
      iex> baseline.soak_eligible
      true
      iex> tick = %{now: now, wave: 0, wave_started_at: now, attempt: 1,
      ...>   servers: [%{id: "eu-1", wave: 0, converged: true, deployment: :succeeded,
      ...>     status: :active, baseline: baseline, health: health}]}
      iex> {:ok, verdict, gate} = KuraGate.tick(gate, tick)
      iex> {verdict.verdict, verdict.signal, verdict.remaining_seconds}
      {:soak, :soaking, 900}
      iex> state = KuraGate.dump_state(gate)
      iex> {:ok, restored} = KuraGate.restore(config, state)
      iex> {:ok, verdict, _gate} = KuraGate.tick(restored, %{tick | now: ~U[2026-07-21 10:02:00Z]})
      iex> {verdict.verdict, verdict.remaining_seconds, verdict.healthy_since}
      {:soak, 780, "2026-07-21T10:00:00Z"}
  """

  alias KuraGate.{Error, Native}

  @enforce_keys [:ref]
  defstruct [:ref]

  @typedoc "A gate: a handle to the NIF's state."
  @opaque t :: %__MODULE__{ref: reference}

  @typedoc "A document: a JSON binary or Elixir terms (see the module doc)."
  @type document :: binary | map

  @typedoc "The answer of one tick."
  @type verdict :: %{
          verdict: :pass | :soak | :hard_stop,
          signal: atom | nil,
          server_id: String.t() | nil,
          healthy_since: String.t() | nil,
          remaining_seconds: non_neg_integer | nil,
          evidence: [evidence]
        }

  @typedoc "One failed check."
  @type evidence :: %{
          server: String.t(),
          signal: atom,
          observed: non_neg_integer | nil,
          band_top: non_neg_integer | nil,
          baseline: non_neg_integer | nil,
          detail: String.t() | nil,
          fence: fence | nil,
          run: run | nil,
          update_paused: update_paused | nil
        }

  @typedoc """
  The backlog's run behind `:outbox_regressed` and
  `:replication_lag_regressed` (the drain rule): not below `level` since
  `since` (RFC 3339 text); `nil` with a drain window of 0.
  """
  @type run :: %{since: String.t(), level: non_neg_integer}

  @typedoc "The operator's pause behind `:update_paused` (check 19, a hard stop)."
  @type update_paused :: %{
          strategy: String.t(),
          partition: non_neg_integer | nil,
          template_image: String.t() | nil,
          held_pods: [String.t()]
        }

  @typedoc "The fence state behind `:serving_fenced` and `:no_valid_writer`."
  @type fence :: %{
          phase: String.t(),
          enabled_pods: non_neg_integer,
          valid_writers: non_neg_integer,
          epoch: non_neg_integer
        }

  @dirty_servers 50
  @dirty_bytes 64 * 1024

  @doc "Creates a gate with empty state from a configuration (`%{}`: the defaults)."
  @spec new(document) :: {:ok, t} | {:error, Error.t()}
  def new(config), do: created(Native.new(config))

  @doc "Creates a gate that continues from a state `dump_state/1` returned."
  @spec restore(document, binary) :: {:ok, t} | {:error, Error.t()}
  def restore(config, state) when is_binary(state), do: created(Native.restore(config, state))

  @doc "Judges one tick. On error the gate's state is unchanged."
  @spec tick(t, document) :: {:ok, verdict, t} | {:error, Error.t()}
  def tick(%__MODULE__{ref: ref} = gate, input) do
    answer = if large?(input), do: Native.tick_dirty(ref, input), else: Native.tick(ref, input)
    answer = if answer == :dirty, do: Native.tick_dirty(ref, input), else: answer

    case answer do
      {:ok, verdict} -> {:ok, verdict, gate}
      {:error, error} -> {:error, error(error)}
    end
  end

  @doc "The gate's state as a JSON binary to store; `restore/2` continues from it."
  @spec dump_state(t) :: binary
  def dump_state(%__MODULE__{ref: ref}) do
    case Native.dump_state(ref) do
      {:ok, state} -> state
      {:error, error} -> raise error(error)
    end
  end

  @doc """
  Captures a server's baseline from its aggregate (`nil`: none) at
  `captured_at`, with the gate's configuration. Pass it as the server's
  `baseline` in every tick of its wave.
  """
  @spec capture_baseline(t, DateTime.t(), map | nil) :: {:ok, map} | {:error, Error.t()}
  def capture_baseline(%__MODULE__{ref: ref}, %DateTime{} = captured_at, health) do
    case Native.capture_baseline(ref, %{captured_at: captured_at, health: health}) do
      {:ok, baseline} -> {:ok, %{baseline | captured_at: exact_time(baseline.captured_at)}}
      {:error, error} -> {:error, error(error)}
    end
  end

  @doc """
  The agent's per-instance judgement: `%{instance, previous, spec_image,
  baseline_source, current, now}` (optionally `config`) in, the next
  `status.rolloutGate` out, as a map with the contract's string keys.
  """
  @spec judge_instance(document) :: {:ok, map} | {:error, Error.t()}
  def judge_instance(input) do
    case Native.judge_instance(input) do
      {:ok, gate} -> {:ok, gate}
      {:error, error} -> {:error, error(error)}
    end
  end

  @doc """
  What-if: the replay document (or exported timeline; a JSON binary or a
  map) judged with its own configuration and with `candidate` (a
  configuration, `%{}` for the defaults), in the wave judge's view or, with
  `agent_view: true`, the agent's. The answer is the map `%{"differences"
  => [...], "summary" => %{...}}` with the contract's string keys: the lines
  and the summary of `kura-gate replay --gate-config FILE --diff`
  (docs/gate-replay.md).
  """
  @spec what_if(document, document, keyword) :: {:ok, map} | {:error, Error.t()}
  def what_if(document, candidate, opts \\ []) do
    case Native.what_if(document, candidate, Keyword.get(opts, :agent_view, false)) do
      {:ok, answer} -> {:ok, answer}
      {:error, error} -> {:error, error(error)}
    end
  end

  @doc "Every signal the gate can answer, as atoms, from the library."
  @spec signals() :: [atom]
  def signals do
    {:ok, %{"signals" => signals}} = Native.describe_library()
    Enum.map(signals, &String.to_atom/1)
  end

  @doc "The library's description (ABI version, limits, vocabulary, defaults)."
  @spec describe() :: map
  def describe do
    {:ok, description} = Native.describe_library()
    description
  end

  @doc "Decodes a JSON document (objects become maps with string keys)."
  @spec decode_json(binary) :: {:ok, term} | {:error, Error.t()}
  def decode_json(json) when is_binary(json) do
    case Native.decode_json(json) do
      {:ok, value} -> {:ok, value}
      {:error, error} -> {:error, error(error)}
    end
  end

  @doc """
  Encodes terms as a JSON document, by the same rules as every input (atom
  keys in snake_case become the contract's camelCase, `DateTime`s RFC 3339).
  """
  @spec encode_json(term) :: {:ok, binary} | {:error, Error.t()}
  def encode_json(term) do
    case Native.encode_json(term) do
      {:ok, json} -> {:ok, json}
      {:error, error} -> {:error, error(error)}
    end
  end

  @doc false
  # Which scheduler a tick is sent to first (for the tests); the NIF sends
  # a tick it finds too large on to a dirty CPU scheduler.
  @spec scheduler_for(document) :: :normal | :dirty_cpu
  def scheduler_for(input), do: if(large?(input), do: :dirty_cpu, else: :normal)

  defp created({:ok, ref}), do: {:ok, %__MODULE__{ref: ref}}
  defp created({:error, error}), do: {:error, error(error)}

  defp large?(input) when is_binary(input), do: byte_size(input) > @dirty_bytes

  defp large?(%{} = input) do
    servers = Map.get(input, :servers) || Map.get(input, "servers")
    longer_than?(servers, @dirty_servers)
  end

  defp large?(_), do: false

  # Counts at most n + 1 elements; improper lists and non-lists are short
  # here (the NIF refuses them with a located error).
  defp longer_than?(_, n) when n < 0, do: true
  defp longer_than?([_ | rest], n), do: longer_than?(rest, n - 1)
  defp longer_than?(_, _), do: false

  # A `DateTime` when it is exactly the gate's instant, else the text.
  defp exact_time(text) do
    case DateTime.from_iso8601(text) do
      {:ok, time, 0} -> if DateTime.to_iso8601(time) == text, do: time, else: text
      _ -> text
    end
  end

  defp error(map), do: struct!(Error, map)
end
