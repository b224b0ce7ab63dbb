defmodule KuraGate.Native do
  @moduledoc false
  # The NIF (bindings/elixir/native/kura_gate_nif), loaded with
  # :erlang.load_nif/2 from this application's priv directory.

  @on_load :load_nif

  def load_nif do
    path = :filename.join(:code.priv_dir(:kura_gate), ~c"kura_gate_nif")
    :erlang.load_nif(path, 0)
  end

  def new(_config), do: :erlang.nif_error(:nif_not_loaded)
  def restore(_config, _state), do: :erlang.nif_error(:nif_not_loaded)
  # {:ok, verdict}, {:error, error}, or :dirty for a tick too large for a
  # normal scheduler (then call tick_dirty/2).
  def tick(_gate, _input), do: :erlang.nif_error(:nif_not_loaded)
  def tick_dirty(_gate, _input), do: :erlang.nif_error(:nif_not_loaded)
  def dump_state(_gate), do: :erlang.nif_error(:nif_not_loaded)
  def capture_baseline(_gate, _input), do: :erlang.nif_error(:nif_not_loaded)
  def judge_instance(_input), do: :erlang.nif_error(:nif_not_loaded)
  def what_if(_document, _candidate, _agent_view), do: :erlang.nif_error(:nif_not_loaded)
  def describe_library(), do: :erlang.nif_error(:nif_not_loaded)
  def decode_json(_json), do: :erlang.nif_error(:nif_not_loaded)
  def encode_json(_term), do: :erlang.nif_error(:nif_not_loaded)
end
