module kura.local/kuragate

go 1.24
