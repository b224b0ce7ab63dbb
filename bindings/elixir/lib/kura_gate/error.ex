defmodule KuraGate.Error do
  @moduledoc """
  A refusal by the gate: `code` (an atom: `:invalid_input`,
  `:invalid_config`, `:invalid_state`, `:attempt_went_back`,
  `:input_too_large`, `:busy`, `:internal`, ...) and a `message` that
  locates the problem; `field` and `server` name the place, `line` and
  `column` locate JSON and UTF-8 errors.
  """
  defexception [:code, :message, :field, :server, :line, :column]

  @type t :: %__MODULE__{
          code: atom,
          message: String.t(),
          field: String.t() | nil,
          server: String.t() | nil,
          line: pos_integer | nil,
          column: non_neg_integer | nil
        }

  @impl true
  def message(%__MODULE__{code: code, message: message}), do: "#{code}: #{message}"
end
