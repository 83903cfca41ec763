#ifndef DOMINO_MODELS_BASE_RESULT_H_
#define DOMINO_MODELS_BASE_RESULT_H_

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace domino {

// Error is what library code returns instead of throwing or exiting: one message a user can act
// on. Messages about files follow the compiler convention "FILE:LINE:COLUMN: KEY: RULE".
class Error {
 public:
  explicit Error(std::string message) : message_(std::move(message)) {}
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

// Status is the result of an operation with no value: ok, or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)) {}  // NOLINT: implicit by design
  static Status Ok() { return Status(); }

  bool ok() const { return !error_.has_value(); }
  const Error& error() const { return *error_; }
  const std::string& message() const { return error_->message(); }

 private:
  std::optional<Error> error_;
};

// Result<T> holds a T or an Error. Accessing value() of an error is a programming mistake.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : state_(std::move(error)) {}  // NOLINT: implicit by design
  Result(Status status) : state_(status.error()) {}  // NOLINT: only from a failed Status

  bool ok() const { return std::holds_alternative<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T& value() & { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  const Error& error() const { return std::get<Error>(state_); }
  const std::string& message() const { return error().message(); }
  Status status() const { return ok() ? Status::Ok() : Status(error()); }

 private:
  std::variant<T, Error> state_;
};

}  // namespace domino

// Returns early from the enclosing function when `expr` (a Status) failed.
#define DOMINO_RETURN_IF_ERROR(expr)                         \
  do {                                                       \
    ::domino::Status domino_status_ = (expr);                \
    if (!domino_status_.ok()) return domino_status_.error(); \
  } while (0)

#endif  // DOMINO_MODELS_BASE_RESULT_H_
