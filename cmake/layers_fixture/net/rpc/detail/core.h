#pragma once
int core();
