-- Managed by gpufleet.numa (role gateway): the request body's "model",
-- read as vLLM reads it, or the reason the body is refused.
--
-- vLLM parses a request with Python's json module: duplicate keys keep the
-- LAST value, escapes in keys are decoded ("mod\u0065l" is "model"), and a
-- body that is not one whole JSON value is an error. HAProxy's json_query
-- keeps the FIRST "model", compares keys undecoded and reads a prefix, so
-- the gateway could send a request (with one model's instance key) to a
-- backend that vLLM then reads as another model. This reader parses the
-- whole buffered body's structure strictly and decodes only what routing
-- needs: the top-level keys and the "model" value. It refuses a second
-- top-level "model", a "model" key written with escapes, a model that is
-- no string or holds a control character, and any structure Python's json
-- would refuse. Inside the other strings it only finds where each ends
-- (skip_string): a body Python refuses for what is inside them reaches no
-- instance as another model's request, as vLLM refuses it too.
--
-- Action gpufleet_request_model sets, in the transaction:
--   txn.body_model       the top-level "model" string, decoded
--   txn.body_error       why the body is refused (answered with 400)
--   txn.body_incomplete  the JSON value does not end within the buffer
--                        (larger than tune.bufsize, or cut short), or the
--                        body goes on past it: the model can only come
--                        from the X-Model header
--   txn.body_checked     set once the body was looked at (a Lua error
--                        leaves it unset, and the gateway refuses)
-- Action gpufleet_request_model_prefix LIMIT sets these and:
--   txn.body_prefix      the first LIMIT bytes of the prompt, the key of a
--                        model's prefix affinity (gateway_affinity): of
--                        "messages", each message's role and text, a line
--                        each, up to and including the first user message
--                        (the system prompt and the first turn); else of
--                        "prompt" (a string, a list's first string, or
--                        the JSON text of a list of token ids)
-- Forms (multipart/form-data, application/x-www-form-urlencoded) are not
-- JSON to vLLM either: their model comes from the X-Model header. A
-- request with the X-Model header is routed by it, and
-- gpufleet_request_model does not read its body.

local MAX_DEPTH = 256
local MAX_NUMBER = 1000   -- characters; Python refuses ints of > 4300 digits

local INCOMPLETE = {}     -- sentinel error: the text ran out

local function invalid(message, position)
  error({message = message, position = position}, 0)
end

-- Each scan is an anchored match of a run, "^[...]*()": Lua steps through
-- the run in one C loop, where find() with a class would start a new match
-- at every byte (13 ns a byte of prompt text, against a few).

-- Index of the first byte after JSON whitespace from i, or error INCOMPLETE.
local function skip_space(body, i)
  local j = body:match("^[ \t\r\n]*()", i)
  if j > #body then error(INCOMPLETE, 0) end
  return j
end

-- The code point of \uXXXX at i (the backslash), or an error.
local function hex4(body, i)
  local digits = body:sub(i + 2, i + 5)
  if #digits < 4 then
    if digits:find("^%x*$") then error(INCOMPLETE, 0) end
    invalid("an invalid \\u escape in a string", i)
  end
  if not digits:find("^%x%x%x%x$") then invalid("an invalid \\u escape in a string", i) end
  return tonumber(digits, 16)
end

local SIMPLE_ESCAPES = {["\""] = "\"", ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f",
                        n = "\n", r = "\r", t = "\t"}

-- PATTERN compiled by HAProxy's regex engine, or nil, with a warning
-- naming WHAT and what the reader does instead (HAProxy built without
-- PCRE2 has no such syntax).
local function compile_regex(pattern, what, instead)
  local compiled, regex = Regex.new(pattern, true)
  if compiled then return regex end
  core.Warning("gpufleet: the regex of " .. what .. " did not compile, " .. instead .. ": " .. tostring(regex))
  return nil
end

-- The rest of a string, from inside it (after a whole escape) to its
-- closing quote, as HAProxy's regex engine (PCRE2, compiled to machine
-- code) matches it: for a string heavy with escaped quotes (a code
-- listing), where the plain search stops at each one.
local string_rest = compile_regex([[(?s)^(?:[^"\\]++|\\.)*+"]], "the rest of a string",
                                  "strings are searched quote by quote")
local ESCAPED_QUOTES_BEFORE_REGEX = 8

-- The index after the closing quote of the string whose opening quote is
-- at i (searching from FROM, inside it, where given: the index after a
-- whole escape): the first quote after it with an even number of
-- backslashes before it. Found with plain (memchr) searches: most of a
-- body's bytes are prompt text in strings like this. What is inside is not
-- checked: Python's json refuses a raw control character or a bad escape
-- there, so such a body reaches no instance as another model's request
-- (vLLM answers 400), and the structure around it is read as Python reads
-- it.
local function skip_string(body, i, from)
  local start = from or i + 1
  local escaped = 0
  while true do
    if escaped == ESCAPED_QUOTES_BEFORE_REGEX and string_rest then
      local matched, found = string_rest:match(body:sub(start))
      if matched and found[1] then return start + #found[1] end
    end
    local quote = body:find("\"", start, true)
    if quote == nil then error(INCOMPLETE, 0) end
    local before = quote - 1
    while body:byte(before) == 92 do before = before - 1 end  -- stops at the opening quote at the latest
    if (quote - 1 - before) % 2 == 0 then return quote + 1 end
    escaped = escaped + 1
    start = quote + 1
  end
end

-- Reads the string whose opening quote is at i. Returns the index after the
-- closing quote and, when decode is true, its decoded text (UTF-8, as
-- Python pairs surrogates; a lone surrogate is kept as Python keeps it)
-- after checking it as Python does; else skip_string's index. With LIMIT,
-- the text decoded is cut once it holds LIMIT bytes or more (the rest is
-- only skipped).
local function read_string(body, i, decode, limit)
  if not decode then return skip_string(body, i) end
  local parts, size = {}, 0
  local start = i + 1
  while true do
    if limit and size >= limit then return skip_string(body, i, start), table.concat(parts) end
    local j
    if limit then
      -- only as far as the bytes still wanted: a prompt's text may be long
      j = start - 1 + body:sub(start, start + limit - size - 1):match("^[^\0-\31\"\\]*()")
    else
      j = body:match("^[^\0-\31\"\\]*()", start)
    end
    if j > #body then error(INCOMPLETE, 0) end
    parts[#parts + 1] = body:sub(start, j - 1)
    size = size + (j - start)
    if limit and size >= limit then return skip_string(body, i, j), table.concat(parts) end
    local c = body:byte(j)
    if c == 34 then return j + 1, table.concat(parts) end
    if c ~= 92 then invalid("a control character inside a string (escape it)", j) end
    local e = body:sub(j + 1, j + 1)
    if e == "" then error(INCOMPLETE, 0) end
    if e == "u" then
      local code = hex4(body, j)
      start = j + 6
      if code >= 0xD800 and code <= 0xDBFF and body:sub(start, start + 1) == "\\u" then
        local low = hex4(body, start)
        if low >= 0xDC00 and low <= 0xDFFF then
          code = 0x10000 + (code - 0xD800) * 0x400 + (low - 0xDC00)
          start = start + 6
        end
      end
      parts[#parts + 1] = utf8.char(code)
      size = size + #parts[#parts]
    elseif SIMPLE_ESCAPES[e] then
      parts[#parts + 1] = SIMPLE_ESCAPES[e]
      size = size + 1
      start = j + 2
    else
      invalid("an invalid escape \\" .. e .. " in a string", j)
    end
  end
end

-- Reads the number at i (RFC 8259, as Python's json takes it); returns the
-- index after it.
local function read_number(body, i)
  local j = i
  if body:byte(j) == 45 then j = j + 1 end                   -- '-'
  local first = body:byte(j)
  if first == nil then error(INCOMPLETE, 0) end
  if first == 48 then j = j + 1                              -- '0'
  elseif first >= 49 and first <= 57 then j = body:match("^[0-9]*()", j)
  else invalid("an invalid number", i) end
  if body:byte(j) == 46 then                                 -- '.'
    local k = body:match("^[0-9]*()", j + 1)
    if k == j + 1 then
      if k > #body then error(INCOMPLETE, 0) end
      invalid("an invalid number", i)
    end
    j = k
  end
  local e = body:byte(j)
  if e == 101 or e == 69 then                                -- 'e', 'E'
    j = j + 1
    local sign = body:byte(j)
    if sign == 43 or sign == 45 then j = j + 1 end
    local k = body:match("^[0-9]*()", j)
    if k == j then
      if k > #body then error(INCOMPLETE, 0) end
      invalid("an invalid number", i)
    end
    j = k
  end
  if j > #body then error(INCOMPLETE, 0) end                 -- more digits may follow
  if j - i > MAX_NUMBER then invalid("a number longer than " .. MAX_NUMBER .. " characters", i) end
  return j
end

local LITERALS = {[116] = "true", [102] = "false", [110] = "null"}

-- One whole JSON value at the start of a text, as HAProxy's regex engine
-- (PCRE2, compiled to machine code) matches it: a top-level member's
-- nested value (a chat's "messages") is skipped in one call, at about 1
-- ns a byte, where reading it token by token in Lua took 250-300 ns a
-- token. Strings as skip_string reads them (only where each ends). Where it
-- does not match (an error, a value cut short, nesting deeper than the
-- engine's stack) the value is read token by token, which finds the error.
local NESTED_VALUE = [[(?s)^(?(DEFINE)(?<s>"(?:[^"\\]++|\\.)*+")(?<w>[ \t\r\n]*+)]] ..
  [[(?<v>(?&s)|-?+(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?+(?:[eE][+-]?+[0-9]++)?+|true|false|null]] ..
  [[|\{(?&w)(?:(?&s)(?&w):(?&w)(?&v)(?&w)(?:,(?&w)(?&s)(?&w):(?&w)(?&v)(?&w))*+)?+\}]] ..
  [[|\[(?&w)(?:(?&v)(?&w)(?:,(?&w)(?&v)(?&w))*+)?+\]))(?&v)]]
local nested_value = compile_regex(NESTED_VALUE, "a JSON value", "nested values are read token by token")

-- The index after the object or array at i, or nil where NESTED_VALUE does
-- not match there, or where less than REGEX_FROM_BYTES of the body is left
-- (a call of the regex engine costs about 10 us: a short value is read
-- token by token sooner).
local REGEX_FROM_BYTES = 4096
local function skip_nested(body, i)
  if nested_value == nil or #body - i < REGEX_FROM_BYTES then return nil end
  local matched, found = nested_value:match(body:sub(i))
  if matched and found[1] then return i + #found[1] end
  return nil
end

-- Reads one scalar or opens a container at i. Returns the next index and,
-- for an opened container, its closing byte.
local function read_value(body, i)
  local c = body:byte(i)
  if c == 34 then return (read_string(body, i, false)) end
  if c == 123 then return i + 1, 125 end                     -- '{' ... '}'
  if c == 91 then return i + 1, 93 end                       -- '[' ... ']'
  if c == 45 or (c >= 48 and c <= 57) then return read_number(body, i) end
  local word = LITERALS[c]
  if word then
    local got = body:sub(i, i + #word - 1)
    if got == word then return i + #word end
    if #got < #word and word:sub(1, #got) == got then error(INCOMPLETE, 0) end
  end
  invalid("an unexpected character", i)
end

-- The top-level keys whose values hold the prompt (prefix affinity).
local PROMPT_KEYS = {messages = true, prompt = true}

-- The top-level "model" of BODY (nil when it has none), and where the
-- values of its top-level "messages" and "prompt" start. Errors:
-- INCOMPLETE, or {message, position}.
local function body_model(body)
  local i = skip_space(body, 1)
  if body:byte(i) ~= 123 then invalid("the body must be a JSON object", i) end
  local closers = {125}                                      -- one per open container
  local in_object = {true}
  local model, models = nil, 0
  local starts = {}
  i = i + 1
  local expect = "first"                                     -- first key or '}' / first value or ']'
  while true do
    i = skip_space(body, i)
    local c = body:byte(i)
    local depth = #closers
    if expect == "after" then
      if c == 44 then                                        -- ','
        i = i + 1
        expect = in_object[depth] and "key" or "value"
      elseif c == closers[depth] then
        closers[depth], in_object[depth] = nil, nil
        i = i + 1
        if depth == 1 then break end
      else
        invalid("expected ',' or the end of the object or array", i)
      end
    elseif in_object[depth] and (expect == "key" or expect == "first") then
      if expect == "first" and c == 125 then
        closers[depth], in_object[depth] = nil, nil
        i = i + 1
        if depth == 1 then break end
        expect = "after"
      else
        if c ~= 34 then invalid("expected a string key", i) end
        local key, key_start = nil, i
        i, key = read_string(body, i, depth == 1)
        if key == "model" and i - key_start ~= 7 then
          invalid("the field model is written with escapes", key_start)
        end
        i = skip_space(body, i)
        if body:byte(i) ~= 58 then invalid("expected ':' after a key", i) end
        i = skip_space(body, i + 1)
        if depth == 1 and PROMPT_KEYS[key] then
          starts[key] = i                                    -- Python keeps the last
        end
        if depth == 1 and key == "model" then
          models = models + 1
          if models > 1 then invalid("the field model appears more than once", i) end
          if body:byte(i) ~= 34 then invalid("the field model must be a string", i) end
          i, model = read_string(body, i, true)
          if model:find("[\0-\31\127]") then invalid("the field model holds a control character", i) end
          expect = "after"
        else
          expect = "value"
        end
      end
    else                                                     -- a value, or ']' first in an array
      if expect == "first" and c == 93 then
        closers[depth], in_object[depth] = nil, nil
        i = i + 1
        expect = "after"
      else
        local closer
        local after = depth == 1 and (c == 123 or c == 91) and skip_nested(body, i)
        if after then
          i = after
        else
          i, closer = read_value(body, i)
        end
        if closer then
          if depth >= MAX_DEPTH then invalid("nested deeper than " .. MAX_DEPTH .. " levels", i) end
          closers[depth + 1] = closer
          in_object[depth + 1] = (closer == 125)
          expect = "first"
        else
          expect = "after"
        end
      end
    end
  end
  -- Python reads the whole body: after the object, only whitespace.
  local rest = body:match("^[ \t\r\n]*()", i)
  if rest <= #body then invalid("text after the JSON object", rest) end
  return model, starts
end

-- The value at i of a body already read whole by body_model (so its
-- structure is valid; a string it did not decode may still hold what
-- read_string refuses, an error the caller takes as no prefix): string
-- values decoded (with LIMIT, their first LIMIT bytes or more), objects as
-- tables (the last of a repeated key), arrays as sequences, numbers as
-- their text, literals as their JSON text. Returns the value and the index
-- after it.
local function decode(body, i, limit)
  i = skip_space(body, i)
  local c = body:byte(i)
  if c == 34 then
    local j, text = read_string(body, i, true, limit)
    return text, j
  end
  if c == 123 or c == 91 then
    local object, value = c == 123, {}
    i = skip_space(body, i + 1)
    if body:byte(i) == (object and 125 or 93) then return value, i + 1 end
    while true do
      local key
      if object then
        i, key = read_string(body, skip_space(body, i), true)
        i = skip_space(body, i) + 1                          -- ':'
      end
      local item
      item, i = decode(body, i, limit)
      if object then value[key] = item else value[#value + 1] = item end
      i = skip_space(body, i)
      local after = body:byte(i)
      i = i + 1
      if after ~= 44 then return value, i end                -- ']' or '}'
    end
  end
  local j = read_value(body, i)
  return body:sub(i, j - 1), j
end

-- The text of a message's content: a string, or the "text" of each part.
local function content_text(content)
  if type(content) == "string" then return content end
  local parts = {}
  if type(content) == "table" then
    for _, part in ipairs(content) do
      if type(part) == "table" and type(part.text) == "string" then parts[#parts + 1] = part.text end
    end
  end
  return table.concat(parts)
end

-- The first LIMIT bytes of the prompt of BODY (read whole by body_model,
-- STARTS its result), or nil: of "messages", each message's role and text
-- (a line each) up to and including the first user message; else of
-- "prompt", the string, the first string of a list, or the JSON text of
-- a list of token ids.
local function body_prefix(body, starts, limit)
  local parts, size = {}, 0
  if starts.messages then
    local i = skip_space(body, starts.messages)
    if body:byte(i) ~= 91 then return nil end
    i = skip_space(body, i + 1)
    while body:byte(i) ~= 93 and size < limit do
      local message
      message, i = decode(body, i, limit)
      if type(message) == "table" and type(message.role) == "string" then
        local line = message.role .. "\n" .. content_text(message.content) .. "\n"
        parts[#parts + 1] = line
        size = size + #line
        if message.role == "user" then break end
      end
      i = skip_space(body, i)
      if body:byte(i) == 44 then i = skip_space(body, i + 1) end
    end
  elseif starts.prompt then
    local i = skip_space(body, starts.prompt)
    local c = body:byte(i)
    if c == 34 then
      local _, text = read_string(body, i, true, limit)
      parts[1] = text
    elseif c == 91 then
      local first = skip_space(body, i + 1)
      if body:byte(first) == 34 then
        local _, text = read_string(body, first, true, limit)
        parts[1] = text
      else
        local _, j = decode(body, i)
        parts[1] = body:sub(i, j - 1)
      end
    end
  end
  local prefix = table.concat(parts):sub(1, limit)
  if prefix == "" then return nil end
  return prefix
end

local FORMS = {["multipart/form-data"] = true, ["application/x-www-form-urlencoded"] = true}

-- (One Content-Type at most: the configuration refuses more before this.)
local function is_form(txn)
  local value = txn.f:req_fhdr("content-type")
  if value == nil then return false end
  local media = value:match("^[^;]*"):lower():gsub("^%s+", ""):gsub("%s+$", "")
  return FORMS[media] == true
end

-- Whether the buffer holds the whole body. A body larger than the buffer
-- is cut where the buffer ends, and the cut may fall after a whole object
-- and some spaces: what follows (a second object, say) makes the body
-- one vLLM refuses. The size announced (Content-Length, or the chunk being
-- read) is more than arrived; or the buffer is full and waits for more (a
-- guard: HAProxy 2.6 announced more in every chunking tried, down to
-- chunks of one byte).
local function whole_body(txn, body)
  return txn.f:req_body_size() <= #body and txn.req:may_recv()
end

-- The gateway's model header (settings.MODEL_HEADER).
local MODEL_HEADER = "x-model"

-- Reads the body; with LIMIT, also sets txn.body_prefix to the first
-- LIMIT bytes of its prompt (body_prefix). Without LIMIT, a request that
-- names its model in the header is not read: the header routes it, and
-- an instance refuses (404) a body naming a model it does not serve.
local function read_request(txn, limit)
  local named = limit == nil and txn.f:req_fhdr(MODEL_HEADER) ~= nil
  local body = not named and txn.sf:req_body() or ""
  if #body > 0 and not is_form(txn) then
    local ok, result, starts = pcall(body_model, body)
    if ok and not whole_body(txn, body) then
      ok, result = false, INCOMPLETE
    end
    if ok then
      if result ~= nil then txn:set_var("txn.body_model", result) end
      if limit then
        -- A prompt this cannot read only leaves the request without a key.
        local read, prefix = pcall(body_prefix, body, starts, limit)
        if read and prefix ~= nil then
          txn:set_var("txn.body_prefix", prefix)
        elseif not read then
          core.Warning("gpufleet: no prompt prefix read: " .. tostring(prefix))
        end
      end
    elseif result == INCOMPLETE then
      txn:set_var("txn.body_incomplete", "1")
    elseif type(result) == "table" then
      txn:set_var("txn.body_error", "The request body is not valid JSON for this gateway: "
                  .. result.message .. " at byte " .. result.position)
    else
      error(result, 0)
    end
  end
  txn:set_var("txn.body_checked", "1")
end

core.register_action("gpufleet_request_model", {"http-req"}, function(txn)
  read_request(txn, nil)
end, 0)

-- gpufleet_request_model_prefix LIMIT: the model, and the prompt's first
-- LIMIT bytes for the backends that hash them (prefix affinity).
core.register_action("gpufleet_request_model_prefix", {"http-req"}, function(txn, limit)
  read_request(txn, tonumber(limit))
end, 1)
