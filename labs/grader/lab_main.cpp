// labs/grader/lab_main.cpp — labNN, the student's grader: lab MHA_LAB_NUMBER's inputs written, its answers program run, graded.
//
// The answers program (labNN-answers: the student's file and the lab's runner,
// labs/runner/lab01.cpp for lab 01) runs in a process of its own; this program, which holds
// the grader and the library, never links the student's code (harness.cpp's run_lab).
#include <string_view>

namespace grader {
int run_lab(std::string_view number, int argc, char** argv);
}

int main(int argc, char** argv) { return grader::run_lab(MHA_LAB_NUMBER, argc, argv); }
